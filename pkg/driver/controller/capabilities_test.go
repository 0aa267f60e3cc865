package controller

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/diskplane/diskplane/pkg/driver"
	"github.com/diskplane/diskplane/pkg/driver/volumehealth"
	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/faults"
)

// serve runs the controller in a real plugin gRPC server, as the binary does.
func (h *harness) serve(t *testing.T) *grpc.ClientConn {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "csi.sock")
	d, err := driver.New(driver.Config{Name: testDriverName, Endpoint: driver.Endpoint{Network: "unix", Address: sock}, Controller: h.svc})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("driver: %v", err)
		}
	})
	eventually(t, "the socket", func() bool { _, err := os.Stat(sock); return err == nil })
	conn, err := grpc.NewClient("unix:"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
		// The socket file exists a moment before it listens.
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func TestCapabilitiesOverGRPC(t *testing.T) {
	h := newHarness(t, emulatortest.Options{}, Options{})
	conn := h.serve(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	caps, err := csi.NewControllerClient(conn).ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got []csi.ControllerServiceCapability_RPC_Type
	for _, c := range caps.GetCapabilities() {
		got = append(got, c.GetRpc().GetType())
	}
	want := []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
		csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
		csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES,
		csi.ControllerServiceCapability_RPC_GET_VOLUME,
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
		csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
		csi.ControllerServiceCapability_RPC_GET_SNAPSHOT,
		csi.ControllerServiceCapability_RPC_CLONE_VOLUME,
		csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
		csi.ControllerServiceCapability_RPC_MODIFY_VOLUME,
		csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
		volumehealth.ControllerVolumeCondition,
		csi.ControllerServiceCapability_RPC_GET_VOLUME_HEALTH,
		csi.ControllerServiceCapability_RPC_LIST_VOLUME_HEALTH,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("controller capabilities %v, want %v", got, want)
	}

	_, err = csi.NewControllerClient(conn).GetCapacity(ctx, &csi.GetCapacityRequest{})
	wantCode(t, err, codes.Unimplemented, "")

	plugin, err := csi.NewIdentityClient(conn).GetPluginCapabilities(ctx, &csi.GetPluginCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var topology, online bool
	for _, c := range plugin.GetCapabilities() {
		topology = topology || c.GetService().GetType() == csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS
		online = online || c.GetVolumeExpansion().GetType() == csi.PluginCapability_VolumeExpansion_ONLINE
	}
	if !topology || !online {
		t.Fatalf("plugin capabilities %v lack topology or online expansion", plugin.GetCapabilities())
	}

	// A request through the server reaches the cloud.
	resp, err := csi.NewControllerClient(conn).CreateVolume(ctx, createReq("pvc-grpc", 1, ""))
	if err != nil || resp.GetVolume().GetVolumeId() == "" {
		t.Fatalf("CreateVolume over gRPC = %v, %v", resp, err)
	}
}

func TestProbeChecksTheCloud(t *testing.T) {
	h := newHarness(t, emulatortest.Options{Faults: faults.Config{Unauthorized: []string{"*"}}}, Options{})
	conn := h.serve(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := csi.NewIdentityClient(conn).Probe(ctx, &csi.ProbeRequest{})
	wantCode(t, err, codes.FailedPrecondition, "cloud API")
	_, err = csi.NewControllerClient(conn).CreateVolume(ctx, createReq("pvc-denied", 1, ""))
	wantCode(t, err, codes.PermissionDenied, "UnauthorizedOperation")

	if err := h.env.Faults().Set(faults.Config{}); err != nil {
		t.Fatal(err)
	}
	h.restart() // a new cloud, without the failed health check cached
	resp, err := h.svc.ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{})
	if err != nil || len(resp.GetCapabilities()) == 0 {
		t.Fatalf("capabilities = %v, %v", resp, err)
	}
	if err := h.svc.Probe(ctx); err != nil {
		t.Fatalf("probe of a healthy cloud: %v", err)
	}
}

package driver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/diskplane/diskplane/pkg/testutil"
	"github.com/diskplane/diskplane/pkg/version"
)

// fakeController is a controller service whose health and plugin
// capabilities a test sets, and whose CreateVolume can be held open to
// observe graceful shutdown.
type fakeController struct {
	csi.UnimplementedControllerServer
	probeErr error
	caps     []*csi.PluginCapability
	started  chan struct{}
	release  chan struct{}
}

func (f *fakeController) Probe(context.Context) error                 { return f.probeErr }
func (f *fakeController) PluginCapabilities() []*csi.PluginCapability { return f.caps }
func (f *fakeController) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if f.started != nil {
		close(f.started)
		select {
		case <-f.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: "vol-1"}}, nil
}

func startDriver(t *testing.T, cfg Config) (*grpc.ClientConn, context.CancelFunc, chan error) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "csi.sock")
	cfg.Endpoint = Endpoint{Network: "unix", Address: sock}
	if cfg.Name == "" {
		cfg.Name = "ebs.csi.diskplane.io"
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("socket never appeared")
		}
		time.Sleep(10 * time.Millisecond)
	}
	conn, err := grpc.NewClient("unix:"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
		// The socket file exists a moment before it listens.
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(); cancel() })
	return conn, cancel, done
}

func TestNewRejectsIncompleteConfig(t *testing.T) {
	if _, err := New(Config{Name: "x"}); err == nil {
		t.Fatal("a driver with no services must be refused")
	}
	if _, err := New(Config{Node: &csi.UnimplementedNodeServer{}}); err == nil {
		t.Fatal("a driver with no name must be refused")
	}
}

func TestParseMode(t *testing.T) {
	for _, tc := range []struct {
		in               string
		controller, node bool
		wantErr          bool
	}{
		{in: "all", controller: true, node: true},
		{in: "controller", controller: true},
		{in: "node", node: true},
		{in: "Node", wantErr: true},
		{in: "", wantErr: true},
	} {
		m, err := ParseMode(tc.in)
		if (err != nil) != tc.wantErr {
			t.Fatalf("ParseMode(%q) error = %v", tc.in, err)
		}
		if err == nil && (m.RunsController() != tc.controller || m.RunsNode() != tc.node) {
			t.Fatalf("ParseMode(%q) = %v: controller %v node %v", tc.in, m, m.RunsController(), m.RunsNode())
		}
	}
}

func TestIdentity(t *testing.T) {
	expansion := &csi.PluginCapability{Type: &csi.PluginCapability_VolumeExpansion_{
		VolumeExpansion: &csi.PluginCapability_VolumeExpansion{Type: csi.PluginCapability_VolumeExpansion_ONLINE}}}
	tests := []struct {
		name       string
		controller *fakeController
		node       csi.NodeServer
		wantCaps   []string
		wantProbe  codes.Code
	}{
		{
			name:       "controller and node",
			controller: &fakeController{caps: []*csi.PluginCapability{expansion}},
			node:       &csi.UnimplementedNodeServer{},
			wantCaps:   []string{"CONTROLLER_SERVICE", "ONLINE"},
			wantProbe:  codes.OK,
		},
		{
			name:      "node only has no controller capability",
			node:      &csi.UnimplementedNodeServer{},
			wantCaps:  nil,
			wantProbe: codes.OK,
		},
		{
			name:       "unhealthy controller fails probe",
			controller: &fakeController{probeErr: errors.New("cloud unreachable")},
			wantCaps:   []string{"CONTROLLER_SERVICE"},
			wantProbe:  codes.FailedPrecondition,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var ctrl csi.ControllerServer
			if tc.controller != nil {
				ctrl = tc.controller
			}
			conn, _, _ := startDriver(t, Config{Controller: ctrl, Node: tc.node})
			id := csi.NewIdentityClient(conn)
			ctx := context.Background()

			info, err := id.GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if info.Name != "ebs.csi.diskplane.io" || info.VendorVersion != version.Version() {
				t.Fatalf("GetPluginInfo = %v", info)
			}
			caps, err := id.GetPluginCapabilities(ctx, &csi.GetPluginCapabilitiesRequest{})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range caps.Capabilities {
				if s := c.GetService(); s != nil {
					got = append(got, s.Type.String())
				}
				if e := c.GetVolumeExpansion(); e != nil {
					got = append(got, e.Type.String())
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.wantCaps, ",") {
				t.Fatalf("capabilities = %v, want %v", got, tc.wantCaps)
			}
			resp, err := id.Probe(ctx, &csi.ProbeRequest{})
			if status.Code(err) != tc.wantProbe {
				t.Fatalf("Probe code = %v (%v), want %v", status.Code(err), err, tc.wantProbe)
			}
			if err == nil && !resp.GetReady().GetValue() {
				t.Fatal("healthy plugin must report ready")
			}
		})
	}
}

func TestUnregisteredServiceIsUnimplemented(t *testing.T) {
	conn, _, _ := startDriver(t, Config{Controller: &fakeController{}})
	_, err := csi.NewNodeClient(conn).NodeGetInfo(context.Background(), &csi.NodeGetInfoRequest{})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("node RPC on a controller-only plugin: %v, want Unimplemented", err)
	}
}

func TestGracefulStopFinishesInFlightAndRemovesSocket(t *testing.T) {
	ctrl := &fakeController{started: make(chan struct{}), release: make(chan struct{})}
	conn, cancel, done := startDriver(t, Config{Controller: ctrl})

	result := make(chan error, 1)
	go func() {
		_, err := csi.NewControllerClient(conn).CreateVolume(context.Background(), &csi.CreateVolumeRequest{Name: "pvc-1"})
		result <- err
	}()
	<-ctrl.started
	cancel()
	select {
	case err := <-done:
		t.Fatalf("server stopped before the in-flight request finished: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(ctrl.release)
	if err := <-result; err != nil {
		t.Fatalf("in-flight request must complete: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	matches, _ := filepath.Glob(filepath.Join(filepath.Dir(conn.Target()[len("unix:"):]), "*"))
	if len(matches) != 0 {
		t.Fatalf("socket left behind: %v", matches)
	}
}

func TestShutdownTimeoutCutsOffHungRequests(t *testing.T) {
	ctrl := &fakeController{started: make(chan struct{}), release: make(chan struct{})}
	defer close(ctrl.release)
	conn, cancel, done := startDriver(t, Config{Controller: ctrl, ShutdownTimeout: 100 * time.Millisecond})
	go func() {
		_, _ = csi.NewControllerClient(conn).CreateVolume(context.Background(), &csi.CreateVolumeRequest{Name: "pvc-1"})
	}()
	<-ctrl.started
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("server did not stop after the shutdown timeout")
	}
}

type secretNode struct{ csi.UnimplementedNodeServer }

func (secretNode) NodeStageVolume(context.Context, *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	return nil, status.Error(codes.InvalidArgument, "staging target path missing")
}

func TestInterceptorLogsWithoutSecretsAndLogsErrorsOnce(t *testing.T) {
	buf := testutil.CaptureKlog(t, 4)

	conn, _, _ := startDriver(t, Config{Node: secretNode{}})
	_, err := csi.NewNodeClient(conn).NodeStageVolume(context.Background(), &csi.NodeStageVolumeRequest{
		VolumeId: "vol-0123456789abcdef0",
		Secrets:  map[string]string{"encryption-passphrase": "hunter2-super-secret"},
	})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("want InvalidArgument, got %v", err)
	}
	out := buf.String()
	if strings.Contains(out, "hunter2-super-secret") {
		t.Fatalf("secret leaked into the log:\n%s", out)
	}
	if !strings.Contains(out, "vol-0123456789abcdef0") {
		t.Fatalf("request was not logged at V(4):\n%s", out)
	}
	if n := strings.Count(out, "staging target path missing"); n != 1 {
		t.Fatalf("error logged %d times, want once:\n%s", n, out)
	}
}

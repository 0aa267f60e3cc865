//go:build linux

package main

import (
	"context"
	"flag"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/diskplane/diskplane/pkg/emulator/imds"
	"github.com/diskplane/diskplane/pkg/registration"
)

// TestNodeModeRegistersItself runs the node plugin against an emulated
// instance metadata service and plays the kubelet: it finds the
// registration socket, reads the plugin's info, and asks the CSI endpoint
// for the node's identity, as the kubelet does when it registers a plugin.
func TestNodeModeRegistersItself(t *testing.T) {
	instance := imds.Instance{ID: "i-0aaaabbbbccccdddd", Type: "m5.large", Region: "us-west-2", AvailabilityZone: "us-west-2b",
		NetworkInterfaces:   []imds.NetworkInterface{{MAC: "0e:00:00:00:00:01", ID: "eni-1", PrivateIPv4s: []string{"10.0.0.5"}}},
		BlockDeviceMappings: map[string]string{"ami": "/dev/xvda", "root": "/dev/xvda"}}
	srv := httptest.NewServer(imds.NewHandler(func() imds.Instance { return instance }, imds.Options{}))
	t.Cleanup(srv.Close)
	t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", srv.URL)

	dir := t.TempDir()
	sock := filepath.Join(dir, "csi.sock")
	regDir := filepath.Join(dir, "plugins_registry")
	fs := flag.NewFlagSet("diskplane", flag.ContinueOnError)
	opts := registerFlags(fs)
	if err := fs.Parse([]string{"--mode=node", "--endpoint=unix://" + sock, "--metadata-sources=imds",
		"--kubelet-registration-path=/var/lib/kubelet/plugins/ebs.csi.diskplane.io/csi.sock",
		"--plugin-registration-dir=" + regDir, "--device-link-dir=" + filepath.Join(dir, "by-id")}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- serve(ctx, opts) }()
	t.Cleanup(func() {
		cancel()
		<-served
	})

	callCtx, callCancel := context.WithTimeout(context.Background(), time.Minute)
	defer callCancel()
	regSock := registration.SocketPath(regDir, DefaultDriverName)
	reg := registerapi.NewRegistrationClient(dialWhenReady(t, regSock))
	info, err := reg.GetInfo(callCtx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != DefaultDriverName || info.Endpoint != "/var/lib/kubelet/plugins/ebs.csi.diskplane.io/csi.sock" || info.Type != registerapi.CSIPlugin {
		t.Fatalf("GetInfo = %+v", info)
	}
	nodeInfo, err := csi.NewNodeClient(dialWhenReady(t, sock)).NodeGetInfo(callCtx, &csi.NodeGetInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if nodeInfo.NodeId != instance.ID || nodeInfo.AccessibleTopology.Segments["topology.kubernetes.io/zone"] != "us-west-2b" ||
		nodeInfo.MaxVolumesPerNode != 26 {
		t.Fatalf("NodeGetInfo = %+v", nodeInfo)
	}
	if _, err := reg.NotifyRegistrationStatus(callCtx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}

	cancel()
	if err := <-served; err != nil {
		t.Fatalf("serve = %v", err)
	}
	served <- nil // for the cleanup
	for _, p := range []string{sock, regSock} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left behind after shutdown: %v", p, err)
		}
	}
}

// dialWhenReady connects to a unix socket that may not exist yet; calls
// wait for it (bounded by their context).
func dialWhenReady(t *testing.T, socket string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix:"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

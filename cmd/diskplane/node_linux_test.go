//go:build linux

package main

import (
	"context"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
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
// It does so with no cloud credentials anywhere, which node mode must not need.
func TestNodeModeRegistersItself(t *testing.T) {
	instance := imds.Instance{ID: "i-0aaaabbbbccccdddd", Type: "m5.large", Region: "us-west-2", AvailabilityZone: "us-west-2b",
		NetworkInterfaces:   []imds.NetworkInterface{{MAC: "0e:00:00:00:00:01", ID: "eni-1", PrivateIPv4s: []string{"10.0.0.5"}}},
		BlockDeviceMappings: map[string]string{"ami": "/dev/xvda", "root": "/dev/xvda"}}
	// The node must need no cloud credentials: none are in the environment,
	// the EC2 endpoint fails the test if anything calls it, and the
	// metadata service is never asked for an instance profile's keys.
	var imdsPaths sync.Map
	handler := imds.NewHandler(func(string) imds.Instance { return instance }, imds.Options{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		imdsPaths.Store(r.URL.Path, true)
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", srv.URL)
	var ec2Calls atomic.Int32
	ec2 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ec2Calls.Add(1)
		http.Error(w, "the node service must not call EC2", http.StatusForbidden)
	}))
	t.Cleanup(ec2.Close)
	t.Setenv("AWS_ENDPOINT_URL_EC2", ec2.URL)
	t.Setenv("AWS_REGION", "us-west-2")
	for _, v := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
		"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"} {
		t.Setenv(v, "")
	}
	missing := filepath.Join(t.TempDir(), "missing")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", missing)
	t.Setenv("AWS_CONFIG_FILE", missing)

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
	probe, err := csi.NewIdentityClient(dialWhenReady(t, sock)).Probe(callCtx, &csi.ProbeRequest{})
	if err != nil || !probe.GetReady().GetValue() {
		t.Fatalf("Probe = %v, %v; want ready without credentials", probe, err)
	}
	if n := ec2Calls.Load(); n != 0 {
		t.Fatalf("the node service called EC2 %d times", n)
	}
	imdsPaths.Range(func(path, _ any) bool {
		if strings.Contains(path.(string), "security-credentials") {
			t.Errorf("the node service asked the metadata service for credentials: %s", path)
		}
		return true
	})

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

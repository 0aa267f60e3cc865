package registration

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

func TestSocketPath(t *testing.T) {
	if got := SocketPath(DefaultDir, "ebs.csi.diskplane.io"); got != "/var/lib/kubelet/plugins_registry/ebs.csi.diskplane.io-reg.sock" {
		t.Fatalf("SocketPath = %s", got)
	}
}

// kubelet plays the kubelet's side of registration against a socket.
type kubelet struct {
	t      *testing.T
	socket string
}

func (k kubelet) client() registerapi.RegistrationClient {
	k.t.Helper()
	// WaitForReady: the socket file exists a moment before it listens.
	conn, err := grpc.NewClient("unix:"+k.socket, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true)))
	if err != nil {
		k.t.Fatal(err)
	}
	k.t.Cleanup(func() { _ = conn.Close() })
	return registerapi.NewRegistrationClient(conn)
}

// waitForSocket waits until a socket other than previous exists at path and
// returns it. A re-created socket may reuse the inode, so its creation time
// tells it apart.
func waitForSocket(t *testing.T, path string, previous os.FileInfo) os.FileInfo {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if fi, err := os.Stat(path); err == nil && fi.Mode()&os.ModeSocket != 0 && (previous == nil || !os.SameFile(fi, previous) || !fi.ModTime().Equal(previous.ModTime())) {
			return fi
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new socket at %s", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRegistrationLifecycle(t *testing.T) {
	dir := t.TempDir()
	socket := SocketPath(filepath.Join(dir, "plugins_registry"), "ebs.csi.diskplane.io")
	s := New("ebs.csi.diskplane.io", "/var/lib/kubelet/plugins/ebs.csi.diskplane.io/csi.sock")
	s.retryDelay = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, socket) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})

	// Calls wait for the socket to listen, but not forever.
	callCtx, callCancel := context.WithTimeout(context.Background(), time.Minute)
	defer callCancel()
	first := waitForSocket(t, socket, nil)
	k := kubelet{t: t, socket: socket}.client()
	info, err := k.GetInfo(callCtx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != registerapi.CSIPlugin || info.Name != "ebs.csi.diskplane.io" ||
		info.Endpoint != "/var/lib/kubelet/plugins/ebs.csi.diskplane.io/csi.sock" || !slices.Equal(info.SupportedVersions, []string{"1.0.0"}) {
		t.Fatalf("GetInfo = %+v", info)
	}
	if s.Registered() {
		t.Fatal("registered before the kubelet said so")
	}
	if _, err := k.NotifyRegistrationStatus(callCtx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	if !s.Registered() {
		t.Fatal("not registered after the kubelet accepted the plugin")
	}

	// A refusal takes the socket away and offers a new one, so the kubelet
	// tries again.
	if _, err := k.NotifyRegistrationStatus(callCtx, &registerapi.RegistrationStatus{PluginRegistered: false, Error: "version mismatch"}); err != nil {
		t.Fatal(err)
	}
	if s.Registered() {
		t.Fatal("still registered after a refusal")
	}
	waitForSocket(t, socket, first)
	retry := kubelet{t: t, socket: socket}.client()
	if _, err := retry.GetInfo(callCtx, &registerapi.InfoRequest{}); err != nil {
		t.Fatalf("GetInfo on the new socket: %v", err)
	}

	// Stopping removes the socket, which unregisters the plugin.
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	done <- nil // for the cleanup
	if _, err := os.Stat(socket); !os.IsNotExist(err) {
		t.Fatalf("socket left behind: %v", err)
	}
}

func TestRunRefusesAPathThatIsNotASocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x-reg.sock")
	if err := os.WriteFile(path, []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := New("x", "/csi.sock").Run(context.Background(), path); err == nil {
		t.Fatal("Run replaced a regular file")
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "mine" {
		t.Fatalf("file changed: %q, %v", b, err)
	}
}

package main

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestServeUntilSignal starts the binary's serve loop, talks to it, sends
// SIGTERM and checks the socket is gone afterwards.
func TestServeUntilSignal(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "csi.sock")
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"--mode=node", "--endpoint=unix://" + sock, "--http-endpoint=127.0.0.1:0"})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("socket never appeared")
		}
		time.Sleep(20 * time.Millisecond)
	}
	conn, err := grpc.NewClient("unix:"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	info, err := csi.NewIdentityClient(conn).GetPluginInfo(context.Background(), &csi.GetPluginInfoRequest{})
	if err != nil || info.Name != DefaultDriverName {
		t.Fatalf("GetPluginInfo = %v, %v", info, err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit code %d after SIGTERM", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("plugin did not stop on SIGTERM")
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("socket left behind after SIGTERM: %v", err)
	}
}

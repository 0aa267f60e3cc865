package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// TestServeUntilSignal starts the binary's serve loop, talks to it over CSI
// and over the HTTP endpoint, sends a stop signal and checks the socket is
// gone afterwards. Both signals a process manager or a user sends must stop
// it gracefully.
func TestServeUntilSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "csi.sock")
			httpAddr := freeLoopbackAddr(t)
			done := make(chan int, 1)
			go func() {
				done <- run([]string{"--mode=node", "--endpoint=unix://" + sock, "--http-endpoint=" + httpAddr})
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
			conn, err := grpc.NewClient("unix:"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
				// The socket file exists a moment before it listens.
				grpc.WithDefaultCallOptions(grpc.WaitForReady(true)))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			rpcCtx, rpcCancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer rpcCancel()
			info, err := csi.NewIdentityClient(conn).GetPluginInfo(rpcCtx, &csi.GetPluginInfoRequest{})
			if err != nil || info.Name != DefaultDriverName {
				t.Fatalf("GetPluginInfo = %v, %v", info, err)
			}
			// Node mode serves no controller service (and so builds no cloud).
			if _, err := csi.NewControllerClient(conn).ControllerGetCapabilities(context.Background(),
				&csi.ControllerGetCapabilitiesRequest{}); status.Code(err) != codes.Unimplemented {
				t.Errorf("a controller RPC in node mode: %v, want Unimplemented", err)
			}
			if status, body := httpGet(t, "http://"+httpAddr+"/healthz"); status != http.StatusOK || strings.TrimSpace(body) != "ok" {
				t.Errorf("/healthz = %d %q, want 200 ok", status, body)
			}
			if status, body := httpGet(t, "http://"+httpAddr+"/metrics"); status != http.StatusOK ||
				!strings.Contains(body, `diskplane_csi_operation_duration_seconds_count{code="OK",method="/csi.v1.Identity/GetPluginInfo"}`) {
				t.Errorf("/metrics = %d without the GetPluginInfo call:\n%s", status, body)
			}

			if err := syscall.Kill(os.Getpid(), sig); err != nil {
				t.Fatal(err)
			}
			select {
			case code := <-done:
				if code != 0 {
					t.Fatalf("exit code %d after %s", code, sig)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("plugin did not stop on %s", sig)
			}
			if _, err := os.Stat(sock); !os.IsNotExist(err) {
				t.Fatalf("socket left behind after %s: %v", sig, err)
			}
			if _, err := net.DialTimeout("tcp", httpAddr, time.Second); err == nil {
				t.Errorf("the HTTP endpoint still answers after %s", sig)
			}
		})
	}
}

// freeLoopbackAddr returns a loopback address with a port nothing listens
// on right now, for a flag that takes host:port.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// httpGet fetches url, retrying while the server is still starting.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			return resp.StatusCode, string(body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", url, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

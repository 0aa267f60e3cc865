package driver

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
)

func TestParseEndpoint(t *testing.T) {
	tests := []struct {
		in      string
		want    Endpoint
		wantErr bool
	}{
		{in: "unix:///csi/csi.sock", want: Endpoint{Network: "unix", Address: "/csi/csi.sock"}},
		{in: "unix:/csi/csi.sock", want: Endpoint{Network: "unix", Address: "/csi/csi.sock"}},
		{in: "UNIX:///var/lib/kubelet/plugins/x/../x/csi.sock", want: Endpoint{Network: "unix", Address: "/var/lib/kubelet/plugins/x/csi.sock"}},
		{in: "tcp://127.0.0.1:10000", want: Endpoint{Network: "tcp", Address: "127.0.0.1:10000"}},
		{in: "tcp://[::1]:10000", want: Endpoint{Network: "tcp", Address: "[::1]:10000"}},
		{in: "unix://relative/csi.sock", wantErr: true},
		{in: "unix://", wantErr: true},
		{in: "tcp://127.0.0.1", wantErr: true},
		{in: "tcp://127.0.0.1:1/path", wantErr: true},
		{in: "http://127.0.0.1:1", wantErr: true},
		{in: "/csi/csi.sock", wantErr: true},
		{in: "", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseEndpoint(tc.in)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("ParseEndpoint(%q) = %+v, want an error", tc.in, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseEndpoint(%q): %v", tc.in, err)
			}
			if got != tc.want {
				t.Fatalf("ParseEndpoint(%q) = %+v, want %+v", tc.in, got, tc.want)
			}
		})
	}
}

func TestListenUnixSocket(t *testing.T) {
	t.Run("creates the directory", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "a", "b", "csi.sock")
		l, err := Endpoint{Network: "unix", Address: path}.Listen()
		if err != nil {
			t.Fatal(err)
		}
		_ = l.Close()
	})
	t.Run("removes a stale socket", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "csi.sock")
		makeStaleSocket(t, path)
		l, err := Endpoint{Network: "unix", Address: path}.Listen()
		if err != nil {
			t.Fatalf("stale socket should be replaced: %v", err)
		}
		_ = l.Close()
	})
	t.Run("refuses a live socket", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "csi.sock")
		live, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer live.Close()
		_, err = Endpoint{Network: "unix", Address: path}.Listen()
		if !errors.Is(err, ErrEndpointInUse) {
			t.Fatalf("want ErrEndpointInUse, got %v", err)
		}
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("live socket must stay: %v", err)
		}
	})
	t.Run("refuses a regular file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "csi.sock")
		if err := os.WriteFile(path, []byte("data"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := (Endpoint{Network: "unix", Address: path}).Listen(); err == nil {
			t.Fatal("want an error for a path that is not a socket")
		}
		if b, err := os.ReadFile(path); err != nil || string(b) != "data" {
			t.Fatalf("file must be untouched: %q %v", b, err)
		}
	})
}

// makeStaleSocket leaves a socket file with nobody listening, as a crashed
// plugin does.
func makeStaleSocket(t *testing.T, path string) {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = l.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("stale socket was not left behind: %v", err)
	}
}

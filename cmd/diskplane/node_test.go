package main

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/diskplane/diskplane/pkg/driver/node"
	"github.com/diskplane/diskplane/pkg/kubeclient"
	"github.com/diskplane/diskplane/pkg/tokenplace"
)

func TestNodeFlagValidation(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr string
	}{
		{args: nil},
		{args: []string{"--volume-attach-limit=20"}},
		{args: []string{"--reserved-volume-attachments=0"}},
		{args: []string{"--kubelet-registration-path=/var/lib/kubelet/plugins/x/csi.sock"}},
		{args: []string{"--volume-attach-limit=0"}, wantErr: "want 1 or more"},
		{args: []string{"--volume-attach-limit=-5"}, wantErr: "want 1 or more"},
		{args: []string{"--reserved-volume-attachments=-2"}, wantErr: "want 0 or more"},
		{args: []string{"--volume-attach-limit=20", "--reserved-volume-attachments=2"}, wantErr: "exclude each other"},
		{args: []string{"--kubelet-registration-path=csi.sock"}, wantErr: "absolute"},
		{args: []string{"--csi-proxy-wait=0s"}, wantErr: "positive"},
		{args: []string{"--windows-host-process"}, wantErr: "for Windows nodes"},
		{args: []string{"--luks-pbkdf-iterations=4"}},
		{args: []string{"--luks-pbkdf-iterations=3"}, wantErr: "4 to 1000 passes"},
		{args: []string{"--luks-max-pbkdf-memory=1048576"}},
		{args: []string{"--luks-max-pbkdf-memory=16384"}, wantErr: "the node must open what it writes"},
		{args: []string{"--luks-pbkdf-memory=262144", "--luks-max-pbkdf-memory=131072"}, wantErr: "the node must open what it writes"},
		{args: []string{"--workload-identity-tokens=secrets"}},
		{args: []string{"--workload-identity-tokens=volume-context"}},
		{args: []string{"--workload-identity-tokens=both"}, wantErr: "want csidriver, volume-context or secrets"},
	}
	for _, tc := range tests {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var f nodeFlags
		f.register(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		err := f.validate()
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%v: validate = %v, want error containing %q", tc.args, err, tc.wantErr)
		}
	}
}

// writeKubeconfig writes into dir a kubeconfig of an API server that
// never answers (clients can be built from it, no call succeeds) and
// returns its path.
func writeKubeconfig(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(path, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestTokenPlace: a stated place is used as it is; otherwise the node
// watches its CSIDriver, or, with no Kubernetes client, refuses to guess.
func TestTokenPlace(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := writeKubeconfig(t, dir)
	tests := []struct {
		place, kubeconfig string
		want              node.TokenPlacer
		wantWatch         bool
		wantErr           string
	}{
		{place: "volume-context", want: tokenplace.Fixed(false)},
		{place: "secrets", want: tokenplace.Fixed(true)},
		{place: "csidriver", kubeconfig: kubeconfig, wantWatch: true},
		{place: "csidriver", kubeconfig: filepath.Join(dir, "missing"), wantErr: "a node outside a pod needs --kubeconfig, or --workload-identity-tokens=volume-context or secrets"},
	}
	for _, tc := range tests {
		client, clientErr := kubeclient.New(tc.kubeconfig)
		got, watch := tokenPlace(&nodeFlags{tokenPlace: tc.place}, client, clientErr, "ebs.csi.diskplane.io")
		switch {
		case tc.wantWatch:
			if watch == nil || got != node.TokenPlacer(watch) {
				t.Errorf("%s with a kubeconfig: %#v, no watch", tc.place, got)
			}
		case tc.wantErr != "":
			_, err := got.TokensInSecrets(t.Context())
			if watch != nil || !errors.Is(err, tokenplace.ErrUnknown) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s without a client: %v", tc.place, err)
			}
		case got != tc.want || watch != nil:
			t.Errorf("%s: %#v, %v", tc.place, got, watch)
		}
	}
}

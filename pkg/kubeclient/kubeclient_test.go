package kubeclient

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

// TestHostProcessSandbox checks the in-cluster configuration of a Windows
// HostProcess container whose service account is mounted only below its
// sandbox.
func TestHostProcessSandbox(t *testing.T) {
	if _, err := os.Stat(filepath.Join("/", serviceAccountDir, "token")); err == nil {
		t.Skip("this machine has a service account token at the usual path, which wins")
	}
	withToken := t.TempDir()
	dir := filepath.Join(withToken, serviceAccountDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"token", "ca.crt"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name, sandbox, host string
		wantErr             string
	}{
		{name: "not in a pod", host: "", wantErr: rest.ErrNotInCluster.Error()},
		{name: "sandbox without a token", sandbox: t.TempDir(), host: "10.96.0.1", wantErr: "HostProcess sandbox"},
		{name: "sandbox without the API server's address", sandbox: withToken, host: "", wantErr: rest.ErrNotInCluster.Error()},
		{name: "sandbox", sandbox: withToken, host: "10.96.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(SandboxEnv, tc.sandbox)
			t.Setenv("KUBERNETES_SERVICE_HOST", tc.host)
			t.Setenv("KUBERNETES_SERVICE_PORT", "443")
			cfg, err := inClusterConfig()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("inClusterConfig() = %v, want an error saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Host != "https://10.96.0.1:443" || cfg.BearerTokenFile != filepath.Join(dir, "token") || cfg.CAFile != filepath.Join(dir, "ca.crt") {
				t.Fatalf("config %+v", cfg)
			}
		})
	}
}

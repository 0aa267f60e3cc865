package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/diskplane/diskplane/pkg/csiproxy"
)

// TestCSIProxyMinimum: every place that tells an operator which csi-proxy a
// Windows node needs names the release the code requires (csiproxy.MinVersion),
// not an older one it once did.
func TestCSIProxyMinimum(t *testing.T) {
	for _, tc := range []struct {
		file string
		// says captures the version the place asks for.
		says *regexp.Regexp
	}{
		{"docs/windows.md", regexp.MustCompile(`Diskplane needs csi-proxy \*\*(v[0-9.]+) or later\*\*`)},
		{"docs/install.md", regexp.MustCompile(`\| csi-proxy \(Windows nodes[^|]*\| \*\*(v[0-9.]+) or later\*\*`)},
		{"charts/diskplane/values.yaml", regexp.MustCompile(`asks csi-proxy \((v[0-9.]+) or later`)},
		{"charts/diskplane/README.md", regexp.MustCompile(`asks csi-proxy \((v[0-9.]+) or later`)},
		{"charts/diskplane/templates/NOTES.txt", regexp.MustCompile(`needs csi-proxy (v[0-9.]+) or\s+later`)},
	} {
		b, err := os.ReadFile(filepath.Join(repoRoot, tc.file))
		if err != nil {
			t.Fatal(err)
		}
		m := tc.says.FindSubmatch(b)
		switch {
		case m == nil:
			t.Errorf("%s no longer says which csi-proxy a Windows node needs (%s): update this test with the new wording", tc.file, tc.says)
		case string(m[1]) != csiproxy.MinVersion:
			t.Errorf("%s asks for csi-proxy %s; the plugin requires %s (csiproxy.MinVersion)", tc.file, m[1], csiproxy.MinVersion)
		}
	}
}

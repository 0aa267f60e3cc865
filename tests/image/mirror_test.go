package image

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDebianMirrorFromAptSources checks where the image's Debian comes
// from: the sources this machine's apt lists, in either format, read with
// apt itself (an APT_CONFIG of the test's own stands in for /etc/apt), and
// nothing when apt lists no such suite, so that bases.sh asks for
// DEBIAN_MIRROR instead of guessing an address.
func TestDebianMirrorFromAptSources(t *testing.T) {
	if _, err := exec.LookPath("apt-get"); err != nil {
		t.Skip("!!! SKIPPED: needs apt-get (a Debian machine, as the image scripts do) !!!")
	}
	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	write("sources.list", "# a one-line source\ndeb http://mirror.example/debian/ bookworm main contrib\n"+
		"deb-src http://src.example/debian bookworm-security main\n")
	write("parts/debian.sources", "Types: deb\nURIs: http://security.example/debian-security\nSuites: bookworm-security\nComponents: main\n")
	write("lists/partial/.keep", "")
	aptConfig := write("apt.conf", "Dir::Etc::sourcelist \""+filepath.Join(dir, "sources.list")+"\";\n"+
		"Dir::Etc::sourceparts \""+filepath.Join(dir, "parts")+"\";\n"+
		"Dir::State::lists \""+filepath.Join(dir, "lists")+"\";\n")

	for suite, want := range map[string]string{
		"bookworm":          "http://mirror.example/debian",
		"bookworm-security": "http://security.example/debian-security",
		"trixie":            "",
	} {
		script := `set -euo pipefail; source hack/image/lib.sh; debian_apt_source "$1"`
		code, out := run(t, environ("APT_CONFIG="+aptConfig), "bash", "-c", script, "bash", suite)
		if code != 0 || strings.TrimSpace(out) != want {
			t.Errorf("debian_apt_source %s = %d %q, want 0 %q", suite, code, out, want)
		}
	}
}

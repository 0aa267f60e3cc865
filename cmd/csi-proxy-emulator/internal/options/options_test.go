package options

import (
	"flag"
	"path/filepath"
	"slices"
	"testing"

	"github.com/diskplane/diskplane/pkg/testutil"
)

// TestFlagsDocumented keeps docs/options.md in step with the command's
// flags (its own and klog's, as Register defines them for the command): a
// flag missing from the page, a row for a flag that is gone, and a default
// that differs all fail, and the message names the row to add or change.
func TestFlagsDocumented(t *testing.T) {
	fs := flag.NewFlagSet("csi-proxy-emulator", flag.ContinueOnError)
	new(Options).Register(fs)
	doc := filepath.Join("..", "..", "..", "..", "docs", "options.md")
	testutil.CheckFlagsDocumented(t, doc, "csi-proxy-emulator", testutil.FlagsOf(fs))
}

func TestDirs(t *testing.T) {
	tests := []struct {
		flag string
		want []string
	}{
		{flag: `C:\var\lib\kubelet`, want: []string{`C:\var\lib\kubelet`}},
		{flag: ` C:\a , ,C:\b,`, want: []string{`C:\a`, `C:\b`}},
		{flag: "", want: nil},
	}
	for _, tc := range tests {
		o := Options{WorkingDirs: tc.flag}
		if got := o.Dirs(); !slices.Equal(got, tc.want) {
			t.Errorf("Dirs of %q = %q, want %q", tc.flag, got, tc.want)
		}
	}
}

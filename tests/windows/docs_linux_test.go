//go:build linux && wine

package windows

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/diskplane/diskplane/pkg/testutil"
)

// TestCSIProxyEmulatorFlagsDocumented keeps docs/options.md in step with
// csi-proxy-emulator's flags, read from its -h output under Wine (it is a
// Windows program): a flag missing from the page, a row for a flag that is
// gone, and a default that differs all fail.
func TestCSIProxyEmulatorFlagsDocumented(t *testing.T) {
	testutil.RequireWine(t, winePrefix)
	cmd := exec.Command(wineRun, filepath.Join(exeDir, "csi-proxy-emulator.exe"), "-h")
	cmd.Env = append(os.Environ(), "WINEPREFIX="+winePrefix)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("csi-proxy-emulator.exe -h: %v\n%s", err, stderr.String())
	}
	flags, err := testutil.FlagsFromUsage(stderr.String())
	if err != nil {
		t.Fatalf("csi-proxy-emulator.exe -h: %v", err)
	}
	if len(flags) < 7 {
		t.Fatalf("csi-proxy-emulator.exe -h listed %d flags:\n%s", len(flags), stderr.String())
	}
	testutil.CheckFlagsDocumented(t, filepath.Join(repoRoot, "docs", "options.md"), "csi-proxy-emulator", flags)
}

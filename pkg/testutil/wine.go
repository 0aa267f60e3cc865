package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// RequireWineEnv names the environment variable that turns a skipped Wine
// test into a failure; CI sets it, as it does RequireRootEnv.
const RequireWineEnv = "DISKPLANE_REQUIRE_WINE_TESTS"

// RequireWine skips the test, loudly, unless Wine can run Diskplane's
// Windows programs here: wine on PATH and the prefix hack/wine/setup.sh
// makes (prefix), with its bcryptprimitives.dll. With
// DISKPLANE_REQUIRE_WINE_TESTS=1 it fails instead.
func RequireWine(t testing.TB, prefix string) {
	t.Helper()
	var reason string
	if _, err := exec.LookPath("wine"); err != nil {
		reason = "needs wine on PATH"
	} else if _, err := os.Stat(filepath.Join(prefix, "drive_c", "windows", "system32", "bcryptprimitives.dll")); err != nil {
		reason = "needs the Wine prefix " + prefix + " with bcryptprimitives.dll"
	}
	if reason != "" {
		SkipLoudly(t, RequireWineEnv, reason, "run hack/wine/setup.sh (make test-windows does)")
	}
}

//go:build linux

package mountertest

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/diskplane/diskplane/pkg/testutil"
)

// capSysResource is the capability the kernel demands for growing a mounted
// ext3/ext4 filesystem (EXT4_IOC_RESIZE_FS); a privileged node pod has it,
// but some sandboxes drop it even for root.
const capSysResource = 24

// RequireExt4OnlineResize skips the test, loudly, when this process may not
// grow a mounted ext4 filesystem; like testutil.RequireRoot it fails instead
// when DISKPLANE_REQUIRE_ROOT_TESTS=1.
func RequireExt4OnlineResize(t testing.TB) {
	t.Helper()
	have, err := hasCapability(capSysResource)
	if err != nil {
		t.Fatal(err)
	}
	if have {
		return
	}
	msg := fmt.Sprintf("!!! SKIPPED %s: needs CAP_SYS_RESOURCE to grow a mounted ext4 filesystem; this process runs without it !!!", t.Name())
	if os.Getenv(testutil.RequireRootEnv) == "1" {
		t.Fatal(msg)
	}
	fmt.Fprintln(os.Stderr, msg)
	t.Skip(msg)
}

// hasCapability reads the effective capability set of this process.
func hasCapability(bit uint) (bool, error) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if hexSet, ok := strings.CutPrefix(line, "CapEff:"); ok {
			set, err := strconv.ParseUint(strings.TrimSpace(hexSet), 16, 64)
			if err != nil {
				return false, fmt.Errorf("parse CapEff %q: %w", hexSet, err)
			}
			return set&(1<<bit) != 0, nil
		}
	}
	return false, fmt.Errorf("no CapEff line in /proc/self/status")
}

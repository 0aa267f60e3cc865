//go:build linux

package mountertest

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/diskplane/diskplane/pkg/testutil"
)

// RequireExt4OnlineResize skips the test, loudly, when this process may not
// grow a mounted ext3/ext4 filesystem: the kernel demands CAP_SYS_RESOURCE
// for EXT4_IOC_RESIZE_FS. A privileged node pod has it, but some sandboxes
// drop it even for root (see testutil.RequireCapability).
func RequireExt4OnlineResize(t testing.TB) {
	t.Helper()
	testutil.RequireCapability(t, unix.CAP_SYS_RESOURCE, "CAP_SYS_RESOURCE", "growing a mounted ext4 filesystem")
}

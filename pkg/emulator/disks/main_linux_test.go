package disks

import (
	"os"
	"strconv"
	"testing"

	"github.com/diskplane/diskplane/pkg/testutil"
)

// TestMain runs the root tests, which mount filesystems, in a mount
// namespace of their own: see testutil.RunInPrivateMountNamespace.
func TestMain(m *testing.M) { os.Exit(testutil.RunInPrivateMountNamespace(m)) }

// TestRunsInAMountNamespaceOfItsOwn: as root, the tests' mount namespace
// is not the one they were started in (their parent's), so no namespace
// made from that one can hold a copy of their mounts.
func TestRunsInAMountNamespaceOfItsOwn(t *testing.T) {
	testutil.RequireRoot(t)
	own, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	parent, err := os.Readlink("/proc/" + strconv.Itoa(os.Getppid()) + "/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	if own == parent {
		t.Fatalf("the tests run in their parent's mount namespace (%s)", own)
	}
}

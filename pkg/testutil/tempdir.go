package testutil

import (
	"os"
	"testing"

	"github.com/diskplane/diskplane/pkg/filetree"
)

// TempDir is t.TempDir for tests that also run as Windows programs under
// Wine, whose cleanup with os.RemoveAll fails there (see pkg/filetree). A
// directory that cannot be removed fails the test.
func TempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "diskplane-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := filetree.Remove(dir); err != nil {
			t.Errorf("remove %s: %v", dir, err)
		}
	})
	return dir
}

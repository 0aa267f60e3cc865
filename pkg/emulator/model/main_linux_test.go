package model

import (
	"os"
	"testing"

	"github.com/diskplane/diskplane/pkg/testutil"
)

// TestMain runs the root tests, which mount filesystems, in a mount
// namespace of their own: see testutil.RunInPrivateMountNamespace.
func TestMain(m *testing.M) { os.Exit(testutil.RunInPrivateMountNamespace(m)) }

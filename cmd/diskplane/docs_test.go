package main

import (
	"flag"
	"path/filepath"
	"testing"

	"github.com/diskplane/diskplane/pkg/testutil"
)

// optionsDoc is the page that lists every flag of both binaries.
var optionsDoc = filepath.Join("..", "..", "docs", "options.md")

// TestFlagsDocumented keeps docs/options.md in step with the plugin's flags
// (its own and klog's, as run parses them): a flag missing from the page, a
// row for a flag that is gone, and a default that differs all fail, and the
// message names the row to add or change.
func TestFlagsDocumented(t *testing.T) {
	fs := flag.NewFlagSet("diskplane", flag.ContinueOnError)
	registerFlags(fs)
	testutil.CheckFlagsDocumented(t, optionsDoc, "diskplane", testutil.FlagsOf(fs))
}

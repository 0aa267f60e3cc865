package main

import (
	"bytes"
	"flag"
	"path/filepath"
	"testing"

	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/testutil"
)

// optionsDoc is the page that lists every flag of both binaries.
var optionsDoc = filepath.Join("..", "..", "docs", "options.md")

// TestFlagsDocumented keeps docs/options.md in step with the emulator's
// flags and those of its subcommands: a flag missing from the page, a
// row for a flag that is gone, and a default that differs all fail, and the
// message names the row to add or change. The server's flags are registered
// as run registers them; the subcommands' come from their -h output.
func TestFlagsDocumented(t *testing.T) {
	fs := flag.NewFlagSet("ec2-emulator", flag.ContinueOnError)
	registerFlags(fs)
	klog.InitFlags(fs)
	testutil.CheckFlagsDocumented(t, optionsDoc, "ec2-emulator", testutil.FlagsOf(fs))

	for _, command := range []string{describeVolumesCommand, releaseDevicesCommand, guestAgentCommand} {
		var stdout, stderr bytes.Buffer
		if code := run([]string{command, "-h"}, &stdout, &stderr); code != 0 {
			t.Fatalf("ec2-emulator %s -h = %d: %s", command, code, stderr.String())
		}
		flags, err := testutil.FlagsFromUsage(stderr.String())
		if err != nil {
			t.Fatalf("ec2-emulator %s -h: %v", command, err)
		}
		testutil.CheckFlagsDocumented(t, optionsDoc, "ec2-emulator "+command, flags)
	}
}

package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/cloud/metadata"
	"github.com/diskplane/diskplane/pkg/testutil"
)

// TestPreStopFlagsDocumented keeps the "diskplane pre-stop" table of
// docs/options.md in step with the hook's flags.
func TestPreStopFlagsDocumented(t *testing.T) {
	fs := flag.NewFlagSet("diskplane "+preStopCommand, flag.ContinueOnError)
	registerPreStopFlags(fs)
	testutil.CheckFlagsDocumented(t, optionsDoc, "diskplane "+preStopCommand, testutil.FlagsOf(fs))
}

func TestPreStopCommandLine(t *testing.T) {
	t.Setenv(metadata.NodeNameEnv, "")
	tests := []struct {
		name string
		args []string
		want int
	}{
		{name: "help", args: []string{"--help"}, want: 0},
		{name: "unknown flag", args: []string{"--mode=node"}, want: 2},
		{name: "positional argument", args: []string{"now"}, want: 2},
		{name: "log file that cannot be opened", args: []string{"--log-to=" + filepath.Join(t.TempDir(), "missing", "log")}, want: 2},
		{name: "no node name", args: nil, want: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			if got := preStop(tc.args, &stderr); got != tc.want {
				t.Fatalf("pre-stop %v = %d, want %d (%s)", tc.args, got, tc.want, stderr.String())
			}
		})
	}
	// run dispatches the subcommand before the plugin's own flags.
	if got := run([]string{preStopCommand, "--no-such-flag"}); got != 2 {
		t.Fatalf("run(pre-stop --no-such-flag) = %d, want 2", got)
	}
}

// TestPreStopLogsTo checks that --log-to sends the hook's lines to the
// file named (in a pod, the plugin process's standard error).
func TestPreStopLogsTo(t *testing.T) {
	t.Setenv(metadata.NodeNameEnv, "")
	log := filepath.Join(t.TempDir(), "plugin-stderr")
	if err := os.WriteFile(log, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		klog.SetOutput(os.Stderr)
		klog.LogToStderr(true)
	})
	var stderr bytes.Buffer
	if got := preStop([]string{"--log-to=" + log}, &stderr); got != 1 {
		t.Fatalf("pre-stop without a node name = %d, want 1", got)
	}
	klog.Flush()
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), metadata.NodeNameEnv) {
		t.Fatalf("the log file holds %q, want the hook's error naming %s", b, metadata.NodeNameEnv)
	}
}

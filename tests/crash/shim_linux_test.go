//go:build linux

package crash

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// shimmedTools are the programs the node plugin may run. Each gets a shim
// in the plugin's PATH, and the plugin's PATH holds nothing else: a program
// missing here makes the uninterrupted run fail, so none goes unseen.
var shimmedTools = []string{
	"blkid", "blockdev", "cryptsetup", "dmsetup", "dumpe2fs", "e2fsck", "fsck",
	"mkfs.ext3", "mkfs.ext4", "mkfs.xfs", "mount", "resize2fs", "umount",
	"xfs_growfs", "xfs_info", "xfs_io",
}

// shims are the node plugin's view of its programs: a shell script per
// program that counts and records each run and, at the armed step, fails it
// or kills the plugin (its parent). Shell scripts, not a Go program, so a
// step costs a shell's start, not a Go binary's (a second under the node
// VM's emulation).
type shims struct {
	// dir holds the scripts: the plugin's whole PATH.
	dir string
	// state holds the plan ("<step> <mode>"), the step count and the trace.
	state string
}

// shimScript is one program's shim. Only shell builtins run before the
// real program (PATH is the shims' own directory); the real program runs
// with the real PATH.
const shimScript = `#!/bin/sh
# A step of the node plugin, as the crash harness (tests/crash) sees it.
read n < %[1]q/count
n=$((n + 1))
echo "$n" > %[1]q/count
echo "%[2]s $*" >> %[1]q/trace
read at mode < %[1]q/plan
if [ "$n" = "$at" ]; then
	case $mode in
	fail) echo "crash harness: step $n (%[2]s) fails" >&2; exit 1 ;;
	kill) kill -9 $PPID; exit 1 ;;
	kill-after) PATH=%[3]q %[4]q "$@"; rc=$?; kill -9 $PPID; exit $rc ;;
	esac
fi
PATH=%[3]q exec %[4]q "$@"
`

// newShims writes a shim for each of shimmedTools found on this machine.
func newShims(t *testing.T, root string) *shims {
	t.Helper()
	s := &shims{dir: filepath.Join(root, "bin"), state: filepath.Join(root, "steps")}
	for _, d := range []string{s.dir, s.state} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	realPath := os.Getenv("PATH")
	for _, name := range shimmedTools {
		real, err := exec.LookPath(name)
		if err != nil {
			continue
		}
		script := fmt.Sprintf(shimScript, s.state, name, realPath, real)
		if err := os.WriteFile(filepath.Join(s.dir, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s.arm(t, interruption{})
	return s
}

// arm sets the plan for the steps from now on and starts counting them
// afresh.
func (s *shims) arm(t *testing.T, i interruption) {
	t.Helper()
	mode := i.Mode
	if mode == "" {
		mode = "none"
	}
	for name, content := range map[string]string{
		"plan":  strconv.Itoa(i.At) + " " + mode + "\n",
		"count": "0\n",
		"trace": "",
	} {
		if err := os.WriteFile(filepath.Join(s.state, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// steps returns the steps run since the last arm, one command line each.
func (s *shims) steps(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.state, "trace"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) == 1 && lines[0] == "" {
		return nil
	}
	return lines
}

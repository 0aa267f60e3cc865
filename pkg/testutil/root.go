// Package testutil holds helpers shared by Diskplane's tests.
package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// RequireRootEnv names the environment variable that turns a skipped root
// test into a failure. CI sets it, so a test that needs loop devices or
// mounts can never pass there by quietly skipping.
const RequireRootEnv = "DISKPLANE_REQUIRE_ROOT_TESTS"

// RequireRoot skips the test, loudly, unless it runs as root with the given
// commands on PATH; when DISKPLANE_REQUIRE_ROOT_TESTS=1 it fails instead.
func RequireRoot(t testing.TB, commands ...string) {
	t.Helper()
	var reason string
	if os.Geteuid() != 0 {
		reason = "needs root (loop devices, mounts)"
	}
	for _, c := range commands {
		if reason == "" {
			if _, err := exec.LookPath(c); err != nil {
				reason = fmt.Sprintf("needs %s on PATH (run hack/install-deps.sh)", c)
			}
		}
	}
	if reason != "" {
		SkipLoudly(t, RequireRootEnv, reason, "run `sudo make test` to exercise real devices")
	}
}

// SkipLoudly skips the test with a message on stderr that names what it
// lacks (reason) and how to get it (hint), or fails it when the
// environment variable require is 1: CI sets those, so a test there can
// never pass by skipping.
func SkipLoudly(t testing.TB, require, reason, hint string) {
	t.Helper()
	msg := fmt.Sprintf("!!! SKIPPED %s: %s; %s !!!", t.Name(), reason, hint)
	if os.Getenv(require) == "1" {
		t.Fatal(msg)
	}
	fmt.Fprintln(os.Stderr, msg)
	t.Skip(msg)
}

// RequireKernelEnv names the environment variable that turns a test skipped
// for a missing kernel feature (device-mapper, the NVMe target, a
// capability) into a failure. The node VM (make test-vm) sets it: its
// kernel has everything a node needs, so there such a test must run.
const RequireKernelEnv = "DISKPLANE_REQUIRE_KERNEL_FEATURES"

// KernelSkipsEnv names the environment variable that holds a file to which
// RequireKernelFeature appends the name of each top-level test it skips.
// hack/vm/test.sh's kernel-only run (CI's profile of make test-vm) runs a
// package on this machine first with it set, then only the tests listed in
// the node VM: what this machine's kernel proved is not proved again there
// under software emulation.
const KernelSkipsEnv = "DISKPLANE_KERNEL_SKIPS_FILE"

// RequireKernelFeature skips the test, loudly, when has is false: this
// machine's kernel lacks what the test needs (why says what). Under
// DISKPLANE_REQUIRE_KERNEL_FEATURES=1 it fails instead. A skip is recorded
// in the file DISKPLANE_KERNEL_SKIPS_FILE names, when it names one.
func RequireKernelFeature(t testing.TB, has bool, why string) {
	t.Helper()
	if has {
		return
	}
	msg := fmt.Sprintf("!!! SKIPPED %s: %s; `make test-vm` runs it in a VM with Debian's kernel !!!", t.Name(), why)
	if os.Getenv(RequireKernelEnv) == "1" {
		t.Fatal(msg)
	}
	if file := os.Getenv(KernelSkipsEnv); file != "" {
		if err := recordKernelSkip(file, t.Name()); err != nil {
			t.Fatalf("recording the skip of %s in %s: %v", t.Name(), file, err)
		}
	}
	fmt.Fprintln(os.Stderr, msg)
	t.Skip(msg)
}

// recordKernelSkip appends test's top-level name (a subtest runs with its
// parent) to file, one name a line. Tests of one binary may skip at once:
// each line is one write to a file opened for appending, which the kernel
// keeps whole.
func recordKernelSkip(file, test string) error {
	top, _, _ := strings.Cut(test, "/")
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(top + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// RequireClusterEnv names the environment variable that turns a test
// skipped for want of the local Kubernetes cluster into a failure: the runs
// that bring the cluster up for it (make test-vm-identity) set it.
const RequireClusterEnv = "DISKPLANE_REQUIRE_CLUSTER_TESTS"

// RequireCluster skips the test, loudly, when has is false: it needs the
// local Kubernetes cluster (hack/local-cluster), and why says what of it.
// Under DISKPLANE_REQUIRE_CLUSTER_TESTS=1 it fails instead.
func RequireCluster(t testing.TB, has bool, why, hint string) {
	t.Helper()
	if !has {
		SkipLoudly(t, RequireClusterEnv, why, hint)
	}
}

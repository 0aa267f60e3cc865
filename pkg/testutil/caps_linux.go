//go:build linux

package testutil

import (
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// HasCapability reports whether this process holds a Linux capability in its
// effective set (e.g. unix.CAP_SYS_RESOURCE).
func HasCapability(c int) (bool, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false, fmt.Errorf("capget: %w", err)
	}
	return data[c/32].Effective&(1<<(c%32)) != 0, nil
}

// RequireCapability skips the test, loudly, when this process lacks a kernel
// capability that the behaviour under test needs (what names it). Unlike
// RequireRoot it skips even when DISKPLANE_REQUIRE_ROOT_TESTS=1: some
// sandboxes drop a capability from the bounding set, and then not even root
// can get it back, so failing would only make such a machine's CI red
// without testing anything more. A privileged node pod holds every
// capability, so the behaviour is exercised wherever the capability exists.
func RequireCapability(t testing.TB, c int, name, what string) {
	t.Helper()
	has, err := HasCapability(c)
	if err != nil {
		t.Fatal(err)
	}
	if has {
		return
	}
	msg := fmt.Sprintf("!!! SKIPPED %s: %s needs %s, which this process lacks (dropped from its bounding set) !!!", t.Name(), what, name)
	fmt.Fprintln(os.Stderr, msg)
	t.Skip(msg)
}

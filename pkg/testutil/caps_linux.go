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
// without testing anything more. The node VM (make test-vm) holds every
// capability and sets DISKPLANE_REQUIRE_KERNEL_FEATURES=1, under which the
// skip is a failure, so the behaviour is always exercised there.
func RequireCapability(t testing.TB, c int, name, what string) {
	t.Helper()
	has, err := HasCapability(c)
	if err != nil {
		t.Fatal(err)
	}
	RequireKernelFeature(t, has, fmt.Sprintf("%s needs %s, which this process lacks (dropped from its bounding set)", what, name))
}

// HasDeviceMapper reports whether this kernel has device-mapper (and so
// whether cryptsetup can open a LUKS device).
func HasDeviceMapper() bool {
	f, err := os.OpenFile("/dev/mapper/control", os.O_RDWR, 0)
	if err != nil {
		return false
	}
	_ = f.Close()
	return true
}

// HasNVMeTarget reports whether this kernel has the NVMe target with its
// configfs mounted (the VM's guest agent exposes volumes through it).
func HasNVMeTarget() bool {
	_, err := os.Stat("/sys/kernel/config/nvmet/subsystems")
	return err == nil
}

//go:build linux

package mounter_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/diskplane/diskplane/pkg/emulator/disks"
	"github.com/diskplane/diskplane/pkg/health"
	"github.com/diskplane/diskplane/pkg/mounter"
	"github.com/diskplane/diskplane/pkg/testutil"
)

// checker is the rig's mounter as a health checker.
func (r *rig) checker() mounter.HealthChecker {
	r.t.Helper()
	h, ok := r.m.(mounter.HealthChecker)
	if !ok {
		r.t.Fatal("the Linux mounter is no HealthChecker")
	}
	return h
}

// reasons checks volumeID at paths and returns the reasons found.
func (r *rig) reasons(volumeID string, paths ...string) []string {
	r.t.Helper()
	rep, err := r.checker().VolumeHealth(context.Background(), volumeID, paths)
	if err != nil {
		r.t.Fatalf("VolumeHealth(%s, %v): %v", volumeID, paths, err)
	}
	var out []string
	for _, f := range rep.Findings {
		out = append(out, f.Reason)
	}
	r.t.Logf("health of %s at %v: %s", volumeID, paths, rep.Message())
	return out
}

// TestVolumeHealthOnRealDevices checks healthy volumes (ext4, xfs, a raw
// block device; staged and published, and looked up by ID alone) and then
// an ext4 filesystem the kernel makes read-only after an error, through
// ext4's own error path (trigger_fs_error, as when it finds its metadata
// damaged), mounted with errors=remount-ro.
func TestVolumeHealthOnRealDevices(t *testing.T) {
	r := newRig(t)
	for _, fsType := range []string{"ext4", "xfs"} {
		v := r.volume(320 * mib) // mkfs.xfs wants 300 MB
		dev := r.find(v)
		stage, target := r.mountPoint(fsType+"-stage"), r.mountPoint(fsType+"-target")
		if err := r.m.FormatAndMount(v.ID, dev, stage, fsType, nil, nil); err != nil {
			t.Fatal(err)
		}
		if err := r.m.BindMount(stage, target, []string{"ro"}); err != nil {
			t.Fatal(err)
		}
		if got := r.reasons(v.ID, target, stage); len(got) != 0 {
			t.Errorf("healthy %s volume: %v", fsType, got)
		}
		if got := r.reasons(v.ID); len(got) != 0 {
			t.Errorf("healthy %s volume looked up by ID: %v", fsType, got)
		}
	}
	block := r.volume(64 * mib)
	node := filepath.Join(r.dir, "pods", "p1", "block")
	if err := r.m.MakeFile(node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.m.CleanupMountPoint(node) })
	if err := r.m.BindMount(r.find(block), node, nil); err != nil {
		t.Fatal(err)
	}
	if got := r.reasons(block.ID, node); len(got) != 0 {
		t.Errorf("healthy raw block volume: %v", got)
	}

	v := r.volume(64 * mib)
	dev := r.find(v)
	stage := r.mountPoint("errors-stage")
	if err := r.m.FormatAndMount(v.ID, dev, stage, "ext4", nil, []string{"errors=remount-ro"}); err != nil {
		t.Fatal(err)
	}
	trigger := filepath.Join("/sys/fs/ext4", filepath.Base(dev), "trigger_fs_error")
	_, err := os.Stat(trigger)
	testutil.RequireKernelFeature(t, err == nil, "ext4 has no trigger_fs_error in sysfs")
	if err := os.WriteFile(trigger, []byte("diskplane health test"), 0o200); err != nil {
		t.Fatal(err)
	}
	// The recorded error is there on every kernel. Whether the kernel also
	// shows that the filesystem takes no more writes differs: the read-only
	// flag (before 6.7, and emergency_ro from 6.15), a shutdown (6.7 to
	// 6.14), or nothing at all (Debian's 6.1.192 logs "Remounting filesystem
	// read-only" and sets no flag), so it is expected only where mountinfo
	// shows it.
	got := r.reasons(v.ID, stage)
	if !slices.Contains(got, "FilesystemCorrupted") {
		t.Errorf("after an ext4 error: %v, want FilesystemCorrupted (ext4 records trigger_fs_error as EFSCORRUPTED)", got)
	}
	if superOptions(t, stage, "ro", "emergency_ro") && !slices.Contains(got, "FilesystemReadOnly") {
		t.Errorf("mountinfo shows the filesystem read-only, and the check says %v", got)
	}
}

// superOptions reports whether the super block options of the filesystem
// mounted at path hold any of opts.
func superOptions(t *testing.T, path string, opts ...string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 10 || f[4] != path {
			continue
		}
		for _, o := range strings.Split(f[len(f)-1], ",") {
			if slices.Contains(opts, o) {
				return true
			}
		}
	}
	return false
}

// TestVolumeHealthDeviceRemovedUnderBlockVolume removes a loop device from
// the kernel while its node stays bind-mounted for a pod, as a raw block
// volume is published: the device is gone (or, when another process took
// the freed number at once, another disk is behind it).
func TestVolumeHealthDeviceRemovedUnderBlockVolume(t *testing.T) {
	r := newRig(t)
	id := "vol-0a1b2c3d4e5f60718"
	img := filepath.Join(r.dir, id+".img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 16*mib); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", img).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup: %v: %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	node := filepath.Join(r.dir, "pods", "p1", "block")
	if err := r.m.MakeFile(node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.m.CleanupMountPoint(node) })
	if err := r.m.BindMount(dev, node, nil); err != nil {
		t.Fatal(err)
	}
	if got := r.reasons(id, node); len(got) != 0 {
		t.Fatalf("before the removal: %v", got)
	}

	if out, err := exec.Command("losetup", "--detach", dev).CombinedOutput(); err != nil {
		t.Fatalf("losetup --detach %s: %v: %s", dev, err, out)
	}
	removeLoop(t, dev)
	got := r.reasons(id, node)
	// The kernel may keep the emptied loop device a moment (its removal is
	// refused while anything holds it open): it then reports no capacity.
	if len(got) != 1 || (got[0] != "DeviceGone" && got[0] != "DeviceReplaced" && got[0] != "DeviceNoCapacity") {
		t.Errorf("after the removal: %v, want DeviceGone (DeviceReplaced if the number was taken again, DeviceNoCapacity if the emptied device is still there)", got)
	}
}

// removeLoop removes a free loop device from the kernel (LOOP_CTL_REMOVE),
// unless another process bound it first.
func removeLoop(t *testing.T, dev string) {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(dev), "loop"))
	if err != nil {
		t.Fatalf("loop device number of %s: %v", dev, err)
	}
	ctl, err := unix.Open("/dev/loop-control", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ctl)
	if err := unix.IoctlSetInt(ctl, unix.LOOP_CTL_REMOVE, n); err != nil && !errors.Is(err, unix.EBUSY) {
		t.Fatalf("remove %s: %v", dev, err)
	}
}

// TestVolumeHealthDeviceRemovedUnderFilesystem removes the NVMe device of a
// mounted ext4 filesystem, as a forced detach on a Nitro instance does (the
// controller is hot-removed, and its namespaces with it): the check finds
// the device gone. It needs the kernel's NVMe target (make test-vm).
func TestVolumeHealthDeviceRemovedUnderFilesystem(t *testing.T) {
	testutil.RequireRoot(t, "mkfs.ext4")
	testutil.RequireKernelFeature(t, testutil.HasNVMeTarget(), "the kernel has no NVMe target (nvmet, nvmet-tcp) with configfs mounted")
	target, err := disks.NewNVMeTarget()
	if err != nil {
		t.Fatal(err)
	}
	id := "vol-0fedcba9876543210"
	img := filepath.Join(t.TempDir(), id+".img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 64*mib); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = target.Detach(id, true) })
	d, err := target.Attach(id, img)
	if err != nil {
		t.Fatal(err)
	}
	m, err := mounter.New(mounter.Options{})
	if err != nil {
		t.Fatal(err)
	}
	stage := filepath.Join(t.TempDir(), "stage")
	if err := m.MakeDir(stage); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(stage, unix.MNT_DETACH) })
	if err := m.FormatAndMount(id, d.Device, stage, "ext4", nil, nil); err != nil {
		t.Fatal(err)
	}
	check := func() health.Report {
		rep, err := m.(mounter.HealthChecker).VolumeHealth(context.Background(), id, []string{stage})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	if rep := check(); rep.Abnormal() {
		t.Fatalf("before the removal: %s", rep.Message())
	}
	if err := target.Detach(id, true); err != nil {
		t.Fatal(err)
	}
	rep := check()
	t.Logf("after the removal: %s", rep.Message())
	gone := false
	for _, f := range rep.Findings {
		gone = gone || f.Reason == "DeviceGone" || f.Reason == "DeviceNoCapacity"
	}
	if !gone {
		t.Errorf("the device of a mounted filesystem was removed, and the check says %q", rep.Message())
	}
}

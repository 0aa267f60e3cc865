package disks

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/diskplane/diskplane/pkg/testutil"
	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// The volume and snapshot IDs the root tests use; each test has its own
// data directory, so they never collide across tests.
const (
	volA  = "vol-0000000000000000a"
	volB  = "vol-0000000000000000b"
	volC  = "vol-0000000000000000c"
	snap1 = "snap-00000000000000001"
)

// newRootStore skips (or, in CI, fails) unless the test runs as root with
// the tools it needs, and returns a loop store over a private data directory
// and link directory. When the test ends, however it ends, it checks that no
// loop device bound to the store's images and no link is left, reports any
// as a failure, and removes them.
func newRootStore(t *testing.T, tools ...string) (*loopStore, string) {
	t.Helper()
	testutil.RequireRoot(t, append([]string{"losetup", "mkfs.ext4", "mount"}, tools...)...)
	dataDir, linkDir := t.TempDir(), t.TempDir()
	t.Cleanup(func() { releaseLeftovers(t, dataDir, linkDir) })
	s, err := NewLoopStore(dataDir, linkDir)
	if err != nil {
		t.Fatalf("NewLoopStore: %v", err)
	}
	return s.(*loopStore), linkDir
}

// releaseLeftovers fails the test for, and then removes, loop devices bound
// to files under dataDir and entries in linkDir. A device marked autoclear
// is given a few seconds first: after a detach that another process (udev's
// probe, in the node VM) still held open, the kernel releases it on that
// process's last close, from a workqueue.
func releaseLeftovers(t *testing.T, dataDir, linkDir string) {
	t.Helper()
	resolved, err := filepath.EvalSymlinks(dataDir)
	if err != nil {
		t.Errorf("resolve %s: %v", dataDir, err)
		return
	}
	devs, err := listLoopDevices()
	if err != nil {
		t.Errorf("list loop devices: %v", err)
	}
	for _, d := range devs {
		backing := strings.TrimSuffix(d.backingFile, deletedSuffix)
		if !strings.HasPrefix(backing, resolved+"/") {
			continue
		}
		if d.autoclear && releasedSoon(d) {
			continue
		}
		t.Errorf("loop device %s bound to %s was left behind", d.path(), d.backingFile)
		if _, err := detachLoop(d, backing, true); err != nil {
			t.Errorf("remove leftover %s: %v", d.path(), err)
		}
	}
	entries, _ := os.ReadDir(linkDir)
	for _, e := range entries {
		t.Errorf("link %s was left behind", e.Name())
	}
}

// releasedSoon reports whether the autoclear device d stops being bound to
// its backing file within 10 seconds.
func releasedSoon(d loopDevice) bool {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		now, bound, err := readLoopDevice(d.name)
		if err == nil && (!bound || now.backingFile != d.backingFile) {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// mustAttach attaches a volume and checks the link and the backing file.
func mustAttach(t *testing.T, s *loopStore, linkDir, volumeID string) string {
	t.Helper()
	dev, err := s.Attach(volumeID)
	if err != nil {
		t.Fatalf("Attach(%s): %v", volumeID, err)
	}
	if target, err := os.Readlink(filepath.Join(linkDir, LinkName(volumeID))); err != nil || target != dev {
		t.Fatalf("link of %s = %q, %v; want %q", volumeID, target, err, dev)
	}
	d, bound, err := readLoopDevice(filepath.Base(dev))
	if err != nil || !bound {
		t.Fatalf("%s is not bound: %v", dev, err)
	}
	if d.backingFile != s.volumePath(volumeID) {
		t.Fatalf("%s is backed by %q, want %q", dev, d.backingFile, s.volumePath(volumeID))
	}
	return dev
}

// mustDetach detaches a volume and checks that its link and device are gone.
func mustDetach(t *testing.T, s *loopStore, linkDir, volumeID string) {
	t.Helper()
	if err := s.Detach(volumeID, false); err != nil {
		t.Fatalf("Detach(%s): %v", volumeID, err)
	}
	assertDetached(t, s, linkDir, volumeID)
}

// assertDetached checks that a volume has no link and no active device.
func assertDetached(t *testing.T, s *loopStore, linkDir, volumeID string) {
	t.Helper()
	if _, err := os.Lstat(filepath.Join(linkDir, LinkName(volumeID))); !os.IsNotExist(err) {
		t.Fatalf("link of %s still exists (err %v)", volumeID, err)
	}
	devs, err := s.activeDevices(s.volumePath(volumeID))
	if err != nil || len(devs) != 0 {
		t.Fatalf("devices still bound to %s: %v, %v", volumeID, devs, err)
	}
}

// writeDevice writes data through a block device and flushes it to the
// volume, as a guest's fsync would.
func writeDevice(t *testing.T, dev string, off int64, data []byte) {
	t.Helper()
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data, off); err != nil {
		t.Fatalf("write %s: %v", dev, err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("sync %s: %v", dev, err)
	}
}

// assertDeviceHolds reads back every extent through a block device.
func assertDeviceHolds(t *testing.T, dev string, extents []extent) {
	t.Helper()
	f, err := os.Open(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, e := range extents {
		got := make([]byte, len(e.data))
		if _, err := f.ReadAt(got, e.off); err != nil {
			t.Fatalf("read %s at %d: %v", dev, e.off, err)
		}
		if !bytes.Equal(got, e.data) {
			t.Fatalf("%s at %d holds other bytes than were written", dev, e.off)
		}
	}
}

// deviceSize is a block device's size as the kernel reports it.
func deviceSize(t *testing.T, dev string) int64 {
	t.Helper()
	n, err := loopSizeBytes(filepath.Base(dev))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// run runs a command and fails the test with its output on error.
func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// mountExt4 makes an ext4 filesystem on dev, mounts it on a private
// directory and unmounts it when the test ends unless the test did.
func mountExt4(t *testing.T, dev string) string {
	t.Helper()
	return mountNew(t, dev, "mkfs.ext4", "-q", "-F")
}

// mountNew makes a filesystem on dev with the given mkfs command, mounts it
// on a private directory and unmounts it when the test ends unless the test
// did.
func mountNew(t *testing.T, dev string, mkfs ...string) string {
	t.Helper()
	run(t, mkfs[0], append(mkfs[1:], dev)...)
	dir := t.TempDir()
	run(t, "mount", dev, dir)
	t.Cleanup(func() { unmountIfMounted(t, dir) })
	return dir
}

// unmountIfMounted unmounts dir when it is a mount point.
func unmountIfMounted(t *testing.T, dir string) {
	t.Helper()
	mounted, err := mountinfo.Mounted(dir)
	if err != nil || !mounted {
		return
	}
	if err := unix.Unmount(dir, 0); err != nil {
		t.Errorf("unmount %s: %v", dir, err)
	}
}

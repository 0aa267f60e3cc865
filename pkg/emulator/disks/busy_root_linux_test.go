package disks

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/diskplane/diskplane/pkg/testutil"
)

// filesystemBytes is the size of the filesystem mounted on dir.
func filesystemBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Blocks) * st.Bsize
}

func TestGrowMountedFilesystem(t *testing.T) {
	tests := []struct {
		fs       string
		mkfs     []string
		size     int64
		grownTo  int64
		grow     func(dev, dir string) []string
		needsCap int // a capability the online grow needs beyond CAP_SYS_ADMIN, or -1
		capName  string
	}{
		{fs: "ext4", mkfs: []string{"mkfs.ext4", "-q", "-F"}, size: 64 * mib, grownTo: 256 * mib,
			grow: func(dev, _ string) []string { return []string{"resize2fs", dev} }, needsCap: unix.CAP_SYS_RESOURCE, capName: "CAP_SYS_RESOURCE"},
		{fs: "xfs", mkfs: []string{"mkfs.xfs", "-q"}, size: 320 * mib, grownTo: 1280 * mib,
			grow: func(_, dir string) []string { return []string{"xfs_growfs", dir} }, needsCap: -1},
	}
	for _, tc := range tests {
		t.Run(tc.fs, func(t *testing.T) {
			s, linkDir := newRootStore(t, tc.mkfs[0], tc.grow("", "")[0])
			if err := s.CreateVolume(volA, tc.size); err != nil {
				t.Fatal(err)
			}
			dev := mustAttach(t, s, linkDir, volA)
			dir := mountNew(t, dev, tc.mkfs...)
			data := pattern(7, 4096)
			if err := os.WriteFile(filepath.Join(dir, "file"), data, 0o600); err != nil {
				t.Fatal(err)
			}
			before := filesystemBytes(t, dir)

			for range 2 { // the second call finds the volume grown
				if err := s.ResizeVolume(volA, tc.grownTo); err != nil {
					t.Fatalf("ResizeVolume: %v", err)
				}
			}
			if got := deviceSize(t, dev); got != tc.grownTo {
				t.Fatalf("device is %d bytes after the resize, want %d", got, tc.grownTo)
			}
			canGrow := tc.needsCap < 0
			if !canGrow {
				var err error
				if canGrow, err = testutil.HasCapability(tc.needsCap); err != nil {
					t.Fatal(err)
				}
			}
			if canGrow {
				grow := tc.grow(dev, dir)
				run(t, grow[0], grow[1:]...)
				after := filesystemBytes(t, dir)
				if after < 3*before || after > tc.grownTo {
					t.Fatalf("filesystem grew from %d to %d bytes; want about 4x, at most %d", before, after, tc.grownTo)
				}
				if got, err := os.ReadFile(filepath.Join(dir, "file")); err != nil || string(got) != string(data) {
					t.Fatalf("file after the online resize: %v", err)
				}
			}
			if err := unix.Unmount(dir, 0); err != nil {
				t.Fatal(err)
			}
			mustDetach(t, s, linkDir, volA)
			if !canGrow {
				t.Skipf("!!! the device grew, but growing %s online needs %s, which this process lacks !!!", tc.fs, tc.capName)
			}
		})
	}
}

func TestDetachBusy(t *testing.T) {
	tests := []struct {
		name string
		// hold makes the device busy and returns what frees it, and the
		// text the ErrBusy message must contain.
		hold func(t *testing.T, dev string) (release func(), reason string)
	}{
		{name: "mounted", hold: func(t *testing.T, dev string) (func(), string) {
			dir := mountExt4(t, dev)
			return func() {
				if err := unix.Unmount(dir, 0); err != nil {
					t.Fatal(err)
				}
			}, "mounted at " + dir
		}},
		{name: "open exclusively", hold: func(t *testing.T, dev string) (func(), string) {
			fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_EXCL|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			closed := false
			t.Cleanup(func() {
				if !closed {
					_ = unix.Close(fd)
				}
			})
			return func() { closed = true; _ = unix.Close(fd) }, "open exclusively"
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, linkDir := newRootStore(t)
			if err := s.CreateVolume(volA, 64*mib); err != nil {
				t.Fatal(err)
			}
			dev := mustAttach(t, s, linkDir, volA)
			release, reason := tc.hold(t, dev)

			err := s.Detach(volA, false)
			if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), reason) {
				t.Fatalf("Detach of a busy device = %v; want ErrBusy saying %q", err, reason)
			}
			// Nothing changed: same device, same link.
			if again := mustAttach(t, s, linkDir, volA); again != dev {
				t.Fatalf("after a busy detach the volume is on %s, want %s", again, dev)
			}
			if err := s.DeleteVolume(volA); !errors.Is(err, ErrBusy) {
				t.Fatalf("DeleteVolume of an attached volume = %v, want ErrBusy", err)
			}

			release()
			mustDetach(t, s, linkDir, volA)
			if err := s.DeleteVolume(volA); err != nil {
				t.Fatalf("DeleteVolume after detach: %v", err)
			}
		})
	}
}

func TestForceDetachMounted(t *testing.T) {
	s, linkDir := newRootStore(t)
	if err := s.CreateVolume(volA, 64*mib); err != nil {
		t.Fatal(err)
	}
	dev := mustAttach(t, s, linkDir, volA)
	dir := mountExt4(t, dev)

	if err := s.Detach(volA, true); err != nil {
		t.Fatalf("forced Detach: %v", err)
	}
	// The volume is detached as far as the store and the node can see...
	assertDetached(t, s, linkDir, volA)
	// ...while the kernel keeps the device for the mounted filesystem,
	// marked to go away on its last close.
	d, bound, err := readLoopDevice(filepath.Base(dev))
	if err != nil || !bound || !d.autoclear || d.backingFile != s.volumePath(volA) {
		t.Fatalf("after a forced detach %s = %+v (bound %v, err %v); want it bound to the image with autoclear", dev, d, bound, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "still-writable"), []byte("x"), 0o600); err != nil {
		t.Fatalf("the mounted filesystem stopped working: %v", err)
	}

	if err := unix.Unmount(dir, 0); err != nil {
		t.Fatal(err)
	}
	waitUnbound(t, dev, s.volumePath(volA), "the unmount")
	// A forced detach of an idle volume unbinds it at once.
	dev = mustAttach(t, s, linkDir, volA)
	if err := s.Detach(volA, true); err != nil {
		t.Fatalf("forced Detach of an idle volume: %v", err)
	}
	assertDetached(t, s, linkDir, volA)
	waitUnbound(t, dev, s.volumePath(volA), "a forced detach of an idle volume")
}

// waitUnbound waits until the loop device dev is no longer bound to image.
// The kernel may release it a moment after the call that asked it to:
// kernels since 5.17 release an autoclear device from a workqueue after its
// last close, and a device some other process (udev's probe, on a node with
// udev such as the node VM) still holds open is only marked autoclear.
func waitUnbound(t *testing.T, dev, image, after string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, bound, _ := readLoopDevice(filepath.Base(dev))
		if !bound || d.backingFile != image {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is still bound to the volume 10 s after %s", dev, after)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

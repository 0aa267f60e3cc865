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

// mountedDir mounts a filesystem of fsType (ext4: on a loop device over a
// sparse file; tmpfs) on a fresh directory for the test, unmounted when it
// ends, after the store's own checks.
func mountedDir(t *testing.T, fsType string) string {
	t.Helper()
	dir := t.TempDir()
	switch fsType {
	case "tmpfs":
		run(t, "mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", dir)
	default:
		img := filepath.Join(t.TempDir(), "fs.img")
		if err := os.WriteFile(img, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(img, 256*mib); err != nil {
			t.Fatal(err)
		}
		run(t, "mkfs."+fsType, "-q", img)
		run(t, "mount", "-o", "loop", img, dir)
	}
	t.Cleanup(func() {
		// The kernel lets go of a detached loop device's backing file
		// asynchronously: wait while the filesystem is still busy.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			err := unix.Unmount(dir, 0)
			if err == nil || errors.Is(err, unix.EINVAL) {
				return
			}
			if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
				t.Errorf("unmount %s: %v", dir, err)
				return
			}
		}
	})
	return dir
}

// newRootStoreIn is newRootStore with the images in dataDir.
func newRootStoreIn(t *testing.T, dataDir string) (*loopStore, string) {
	t.Helper()
	linkDir := t.TempDir()
	t.Cleanup(func() { releaseLeftovers(t, dataDir, linkDir) })
	s, err := NewLoopStore(dataDir, linkDir)
	if err != nil {
		t.Fatalf("NewLoopStore: %v", err)
	}
	return s.(*loopStore), linkDir
}

// TestFailIO makes an attached volume's device fail under a mounted ext4,
// with the images on ext4: a write and its sync fail with EIO, ext4 records
// the error and turns read-only, reads still succeed and the image keeps
// what was written before; healing lets writes through again, and a detach
// ends the fault for good. A volume without a device is ErrNotFound.
func TestFailIO(t *testing.T) {
	testutil.RequireRoot(t, "losetup", "mkfs.ext4", "mount")
	s, linkDir := newRootStoreIn(t, mountedDir(t, "ext4"))
	if err := s.CreateVolume(volA, 64*mib); err != nil {
		t.Fatal(err)
	}
	if err := s.FailIO(volA, true); !errors.Is(err, ErrNotFound) {
		t.Fatalf("FailIO of a detached volume = %v, want ErrNotFound", err)
	}
	dev := mustAttach(t, s, linkDir, volA)
	dir := mountExt4(t, dev)
	if err := os.WriteFile(filepath.Join(dir, "before"), []byte("kept"), 0o600); err != nil {
		t.Fatal(err)
	}
	run(t, "sync", "-f", dir)

	for range 2 { // asking twice changes nothing more
		if err := s.FailIO(volA, true); err != nil {
			t.Fatalf("FailIO: %v", err)
		}
	}
	f, err := os.Create(filepath.Join(dir, "after"))
	if err == nil {
		_, _ = f.Write(make([]byte, 1<<20))
		err = f.Sync()
		f.Close()
	}
	if !errors.Is(err, unix.EIO) {
		t.Fatalf("writing to the failing device: %v, want EIO", err)
	}
	// ext4 records the error once its journal could not be written.
	counter := filepath.Join("/sys/fs/ext4", filepath.Base(dev), "errors_count")
	deadline := time.Now().Add(20 * time.Second)
	for {
		n, err := os.ReadFile(counter)
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(string(n)) != "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ext4 recorded no error 20 s after its device failed")
		}
		_ = os.WriteFile(filepath.Join(dir, "provoke"), []byte("x"), 0o600)
		time.Sleep(200 * time.Millisecond)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "before")); err != nil || string(b) != "kept" {
		t.Errorf("reading from the failing device: %q, %v", b, err)
	}

	unmountIfMounted(t, dir)
	if err := s.FailIO(volA, false); err != nil {
		t.Fatalf("FailIO(false): %v", err)
	}
	// The kernel reports the writeback errors of the failing time once, to
	// whoever syncs the device next; after that the healed device writes.
	if f, err := os.OpenFile(dev, os.O_RDWR, 0); err == nil {
		_ = f.Sync()
		f.Close()
	}
	writeDevice(t, dev, 63*mib, []byte("healed"))
	if err := s.FailIO(volA, true); err != nil {
		t.Fatal(err)
	}
	mustDetach(t, s, linkDir, volA) // ends the fault
	dev = mustAttach(t, s, linkDir, volA)
	writeDevice(t, dev, 62*mib, []byte("a new attachment is healthy"))
	mustDetach(t, s, linkDir, volA)
	if err := s.DeleteVolume(volA); err != nil {
		t.Fatalf("DeleteVolume after a fault: %v", err)
	}
	waitLoopsReleased(t, s)
}

// waitLoopsReleased waits until no loop device is bound to the store's
// images: a kernel may tear a detached device down a moment after the
// detach returned (Linux 6.1 does it in a work queue).
func waitLoopsReleased(t *testing.T, s *loopStore) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		devs, err := listLoopDevices()
		if err != nil {
			t.Fatal(err)
		}
		bound := false
		for _, d := range devs {
			bound = bound || strings.HasPrefix(d.backingFile, s.volumesDir+"/")
		}
		if !bound || time.Now().After(deadline) {
			return
		}
	}
}

// TestFailIORefusedWhereWritesGoThrough checks that on a filesystem that
// lets writes through to an immutable file opened before (tmpfs), FailIO
// refuses and leaves the image as it was.
func TestFailIORefusedWhereWritesGoThrough(t *testing.T) {
	testutil.RequireRoot(t, "losetup", "mount")
	s, linkDir := newRootStoreIn(t, mountedDir(t, "tmpfs"))
	if err := s.CreateVolume(volA, 16*mib); err != nil {
		t.Fatal(err)
	}
	dev := mustAttach(t, s, linkDir, volA)
	if err := s.FailIO(volA, true); !errors.Is(err, ErrIOFaultsUnsupported) {
		t.Fatalf("FailIO on tmpfs = %v, want ErrIOFaultsUnsupported", err)
	}
	if st, err := os.Stat(s.volumePath(volA)); err != nil || st.Size() != 16*mib {
		t.Fatalf("image after the refusal: %v, %v; want it as it was", st, err)
	}
	writeDevice(t, dev, 0, []byte("still writable"))
	mustDetach(t, s, linkDir, volA)
	waitLoopsReleased(t, s)
}

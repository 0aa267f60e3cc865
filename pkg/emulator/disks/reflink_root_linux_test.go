package disks

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/diskplane/diskplane/pkg/testutil"
)

// mountXFS mounts a fresh XFS filesystem with reflink support on a private
// directory, backed by a sparse file and a loop device that are removed when
// the test ends.
func mountXFS(t *testing.T) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "xfs.img")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(512 * mib); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	dev := bindManually(t, img)
	run(t, "mkfs.xfs", "-q", "-m", "reflink=1", dev)
	dir := t.TempDir()
	run(t, "mount", dev, dir)
	t.Cleanup(func() { unmountIfMounted(t, dir) })
	return dir
}

// TestReflinkOnXFS checks that images on a filesystem with reflink share
// extents instead of being copied, and hold the same bytes.
func TestReflinkOnXFS(t *testing.T) {
	testutil.RequireRoot(t, "losetup", "mkfs.xfs", "mount")
	dir := mountXFS(t)

	written := []extent{{0, pattern(1, 64*1024)}, {6 * mib, pattern(2, mib)}}
	src := makeImage(t, filepath.Join(dir, "src.img"), 8*mib, written)
	dst := makeImage(t, filepath.Join(dir, "dst.img"), 0, nil)
	method, err := copyImage(dst, src)
	if err != nil {
		t.Fatalf("copyImage: %v", err)
	}
	if method != copyReflink {
		t.Fatalf("copy method on XFS = %q, want %q", method, copyReflink)
	}
	if !bytes.Equal(readAll(t, dst.Name()), readAll(t, src.Name())) {
		t.Fatal("the reflinked copy holds other bytes")
	}

	// The store works the same on such a filesystem: a snapshot and a
	// restore from it hold the volume's bytes.
	s, err := NewLoopStore(filepath.Join(dir, "data"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ls := s.(*loopStore)
	if err := s.CreateVolume(volA, 8*mib); err != nil {
		t.Fatal(err)
	}
	vol, err := os.OpenFile(ls.volumePath(volA), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer vol.Close()
	for _, e := range written {
		if _, err := vol.WriteAt(e.data, e.off); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CreateSnapshot(snap1, volA); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateVolumeFromSnapshot(volB, snap1, 16*mib); err != nil {
		t.Fatal(err)
	}
	want := append(readAll(t, ls.volumePath(volA)), make([]byte, 8*mib)...)
	if !bytes.Equal(readAll(t, ls.volumePath(volB)), want) {
		t.Fatal("the volume restored on XFS holds other bytes")
	}
}

package disks

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

const mib = 1 << 20

// extent is a written range of a test image.
type extent struct {
	off  int64
	data []byte
}

// pattern returns n bytes that differ from zero and from other patterns.
func pattern(seed byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i%251) + 1
	}
	return b
}

// makeImage writes a sparse file of the given size holding the extents.
func makeImage(t *testing.T, path string, size int64, extents []extent) *os.File {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	for _, e := range extents {
		if _, err := f.WriteAt(e.data, e.off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	return f
}

// dataSegments lists a file's data ranges as SEEK_DATA/SEEK_HOLE report them.
func dataSegments(t *testing.T, f *os.File) [][2]int64 {
	t.Helper()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	var segs [][2]int64
	for off := int64(0); off < st.Size(); {
		start, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		end, err := unix.Seek(int(f.Fd()), start, unix.SEEK_HOLE)
		if err != nil {
			t.Fatal(err)
		}
		segs = append(segs, [2]int64{start, end})
		off = end
	}
	return segs
}

// reportsHoles tells whether the filesystem under dir reports the holes of a
// sparse file (tmpfs, ext4, xfs and btrfs do).
func reportsHoles(t *testing.T, dir string) bool {
	t.Helper()
	probe := makeImage(t, filepath.Join(dir, "probe.img"), 2*mib, []extent{{mib, pattern(0, 4096)}})
	return len(dataSegments(t, probe)) == 1 && dataSegments(t, probe)[0][0] > 0
}

func readAll(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCopyPreservesBytesAndHoles(t *testing.T) {
	tests := []struct {
		name    string
		size    int64
		extents []extent
	}{
		{name: "empty file"},
		{name: "all hole", size: 8 * mib},
		{name: "data at the start", size: 8 * mib, extents: []extent{{0, pattern(1, 4096)}}},
		{name: "data at the end", size: 8 * mib, extents: []extent{{8*mib - 4096, pattern(2, 4096)}}},
		{name: "scattered", size: 16 * mib, extents: []extent{
			{0, pattern(3, 4096)}, {5 * mib, pattern(4, 3*mib)}, {12*mib + 4096, pattern(5, 8192)},
		}},
		{name: "written zeros stay zeros", size: 4 * mib, extents: []extent{{mib, make([]byte, 64*1024)}, {3 * mib, pattern(6, 512)}}},
		{name: "size not block aligned", size: 3*mib + 123, extents: []extent{{3*mib + 100, pattern(7, 23)}}},
	}
	copiers := []struct {
		name string
		copy func(dst, src *os.File) error
	}{
		{name: "sparseCopy", copy: sparseCopy},
		{name: "copyImage", copy: func(dst, src *os.File) error { _, err := copyImage(dst, src); return err }},
	}
	for _, tc := range tests {
		for _, c := range copiers {
			t.Run(tc.name+"/"+c.name, func(t *testing.T) {
				dir := t.TempDir()
				src := makeImage(t, filepath.Join(dir, "src.img"), tc.size, tc.extents)
				dstPath := filepath.Join(dir, "dst.img")
				dst := makeImage(t, dstPath, 0, nil)
				if err := c.copy(dst, src); err != nil {
					t.Fatalf("copy: %v", err)
				}
				if err := dst.Sync(); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(readAll(t, dstPath), readAll(t, src.Name())) {
					t.Fatal("the copy's bytes differ from the source's")
				}
				if !reportsHoles(t, dir) {
					t.Skipf("bytes match; holes not checked: the filesystem under %s does not report them", dir)
				}
				if srcSegs, dstSegs := dataSegments(t, src), dataSegments(t, dst); !slices.Equal(srcSegs, dstSegs) {
					t.Fatalf("data ranges of the copy %v differ from the source's %v", dstSegs, srcSegs)
				}
			})
		}
	}
}

// TestCopyRangeBuffered covers the fallback for filesystems without
// copy_file_range: one range lands at the same offset, nothing else is
// written.
func TestCopyRangeBuffered(t *testing.T) {
	dir := t.TempDir()
	data := pattern(9, 3*mib+17)
	src := makeImage(t, filepath.Join(dir, "src.img"), 8*mib, []extent{{mib, data}})
	dst := makeImage(t, filepath.Join(dir, "dst.img"), 8*mib, nil)
	if err := copyRangeBuffered(dst, src, mib, int64(len(data))); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, dst.Name())
	want := make([]byte, 8*mib)
	copy(want[mib:], data)
	if !bytes.Equal(got, want) {
		t.Fatal("buffered range copy wrote the wrong bytes")
	}
}

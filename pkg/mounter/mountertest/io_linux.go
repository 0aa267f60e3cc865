//go:build linux

package mountertest

import (
	"os"
	"testing"
)

// WriteAt writes b at offset off of a device or file and syncs it, so a
// later read through another path (the backing file, a remount) sees it.
func WriteAt(t testing.TB, path string, b []byte, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// ReadAt reads n bytes at offset off of a device or file.
func ReadAt(t testing.TB, path string, n int, off int64) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	return b
}

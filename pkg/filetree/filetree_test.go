package filetree

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestRemove(t *testing.T) {
	dir, err := os.MkdirTemp("", "filetree-")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"a/b/c", "a/d", "e"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"a/b/c/f", "a/g", "h"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := Remove(dir); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("%s is still there: %v", dir, err)
	}
	if err := Remove(dir); err != nil {
		t.Fatalf("Remove of a missing path: %v", err)
	}
}

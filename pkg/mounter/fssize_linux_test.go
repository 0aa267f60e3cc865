//go:build linux

package mounter

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestFilesystemBytes reads the size of filesystems mkfs made on files
// against what they were made over: each spans its file, to the block.
func TestFilesystemBytes(t *testing.T) {
	tests := []struct {
		name   string
		mkfs   []string
		size   int64
		blocks int64 // the block size the filesystem rounds the file down to
	}{
		{"ext4", []string{"mkfs.ext4", "-q", "-F"}, 64<<20 + 3000, 4096},
		{"ext4, 1 KiB blocks, no 64bit", []string{"mkfs.ext4", "-q", "-F", "-b", "1024", "-O", "^64bit"}, 64 << 20, 1024},
		{"ext3", []string{"mkfs.ext3", "-q", "-F"}, 64 << 20, 4096},
		{"xfs", []string{"mkfs.xfs", "-q", "-f"}, 320 << 20, 4096},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := exec.LookPath(tc.mkfs[0]); err != nil {
				t.Skipf("%s is not installed", tc.mkfs[0])
			}
			img := filepath.Join(t.TempDir(), "fs.img")
			if err := os.WriteFile(img, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(img, tc.size); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(tc.mkfs[0], append(tc.mkfs[1:], img)...).CombinedOutput(); err != nil {
				t.Fatalf("%v: %v: %s", tc.mkfs, err, out)
			}
			got, known, err := filesystemBytes(img)
			if err != nil || !known {
				t.Fatalf("filesystemBytes = %d, %v, %v", got, known, err)
			}
			if want := tc.size / tc.blocks * tc.blocks; got > want || want-got >= growSlack {
				t.Fatalf("filesystem of %d bytes on %d bytes, want it to span them (%d)", got, tc.size, want)
			}
		})
	}
	blank := filepath.Join(t.TempDir(), "blank.img")
	if err := os.WriteFile(blank, make([]byte, 8192), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, known, err := filesystemBytes(blank); err != nil || known {
		t.Fatalf("a blank file: known %v, %v", known, err)
	}
}

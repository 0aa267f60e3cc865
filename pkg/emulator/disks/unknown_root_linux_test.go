package disks

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// Images of the unknown-image tests besides the shared volA…volC and snap1.
const (
	volD  = "vol-0000000000000000d"
	snap2 = "snap-00000000000000002"
)

// writeFile creates a file (and its directory) with a little content.
func writeFile(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// exists reports whether path exists (a symbolic link counts, not followed).
func exists(t *testing.T, path string) bool {
	t.Helper()
	_, err := os.Lstat(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return err == nil
}

func TestRemoveUnknownImagesAfterReconcile(t *testing.T) {
	s, linkDir := newRootStore(t)
	dataDir := filepath.Dir(s.volumesDir)
	for _, id := range []string{volA, volB, volC, volD} {
		if err := s.CreateVolume(id, 64*mib); err != nil {
			t.Fatal(err)
		}
	}
	for snap, vol := range map[string]string{snap1: volB, snap2: volC} {
		if err := s.CreateSnapshot(snap, vol); err != nil {
			t.Fatal(err)
		}
	}
	// Before the "crash": A is attached and known; C and D were attached
	// too but the saved state does not name them, and D is still mounted.
	mustAttach(t, s, linkDir, volA)
	mustAttach(t, s, linkDir, volC)
	devD := mustAttach(t, s, linkDir, volD)
	mountD := mountExt4(t, devD)
	known := []string{volA, volB, snap1}

	// Files in the store's directories that are not images of its layout.
	outside := filepath.Join(t.TempDir(), "vol-0000000000000000e.img")
	writeFile(t, outside)
	linkedImage := filepath.Join(s.volumesDir, "vol-0000000000000000e.img")
	if err := os.Symlink(outside, linkedImage); err != nil {
		t.Fatal(err)
	}
	dirImage := filepath.Join(s.snapshotsDir, "snap-0000000000000000e.img")
	if err := os.Mkdir(dirImage, 0o700); err != nil {
		t.Fatal(err)
	}
	strays := []string{
		filepath.Join(s.volumesDir, "notes.txt"),
		filepath.Join(s.volumesDir, tempPrefix+"vol-0000000000000000f.img-1"),
		filepath.Join(s.volumesDir, "vol-0000000000000000f.img.bak"),
		filepath.Join(s.volumesDir, "vol-00000000000000_0f.img"),
		filepath.Join(s.snapshotsDir, "vol-0000000000000000f.img"),
		filepath.Join(dataDir, "vol-0000000000000000f.img"),
	}
	for _, p := range strays {
		writeFile(t, p)
	}

	if err := s.Reconcile([]string{volA}); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	unknown, err := s.UnknownImages(known)
	if err != nil {
		t.Fatalf("UnknownImages: %v", err)
	}
	if want := []string{snap2, volC, volD}; !slices.Equal(unknown, want) {
		t.Fatalf("UnknownImages = %v, want %v", unknown, want)
	}
	// D's device is detached lazily and still mounted: its image stays.
	removed, err := s.RemoveUnknownImages(dataDir, known)
	if err != nil {
		t.Fatalf("RemoveUnknownImages: %v", err)
	}
	if want := []string{snap2, volC}; !slices.Equal(removed, want) {
		t.Fatalf("RemoveUnknownImages removed %v, want %v", removed, want)
	}
	if err := os.WriteFile(filepath.Join(mountD, "still-writable"), []byte("x"), 0o600); err != nil {
		t.Fatalf("the filesystem on the kept image stopped working: %v", err)
	}

	type file struct {
		path     string
		wantGone bool
	}
	files := []file{
		{path: s.volumePath(volA)},
		{path: s.volumePath(volB)},
		{path: s.snapshotPath(snap1)},
		{path: s.volumePath(volC), wantGone: true},
		{path: s.snapshotPath(snap2), wantGone: true},
		{path: s.volumePath(volD)},
		{path: linkedImage},
		{path: outside},
		{path: dirImage},
	}
	for _, p := range strays {
		files = append(files, file{path: p})
	}
	for _, f := range files {
		if gone := !exists(t, f.path); gone != f.wantGone {
			t.Errorf("%s gone: %v, want %v", f.path, gone, f.wantGone)
		}
	}

	// Once D is unmounted the kernel frees its device, and the next call
	// removes its image; then nothing unknown is left.
	if err := unix.Unmount(mountD, 0); err != nil {
		t.Fatal(err)
	}
	// The kernel clears an autoclear device after its last close in a work
	// item, so the device may outlive the unmount for a moment.
	waitUnbound(t, devD, s.volumePath(volD), "the unmount")
	if removed, err := s.RemoveUnknownImages(dataDir, known); err != nil || !slices.Equal(removed, []string{volD}) {
		t.Fatalf("RemoveUnknownImages after the unmount = %v, %v; want [%s]", removed, err, volD)
	}
	if unknown, err := s.UnknownImages(known); err != nil || len(unknown) != 0 {
		t.Fatalf("UnknownImages at the end = %v, %v; want none", unknown, err)
	}
	mustDetach(t, s, linkDir, volA)
}

func TestRemoveUnknownImagesRefuses(t *testing.T) {
	tests := []struct {
		name string
		// arrange changes the store's directories and returns the state
		// directory and known IDs to pass.
		arrange func(t *testing.T, s *loopStore) (stateDir string, known []string)
		wantErr bool
	}{
		{name: "the store's own directory through a symbolic link", arrange: func(t *testing.T, s *loopStore) (string, []string) {
			link := filepath.Join(t.TempDir(), "data")
			if err := os.Symlink(filepath.Dir(s.volumesDir), link); err != nil {
				t.Fatal(err)
			}
			return link, nil
		}},
		{name: "no state directory", wantErr: true, arrange: func(*testing.T, *loopStore) (string, []string) {
			return "", nil
		}},
		{name: "another data directory", wantErr: true, arrange: func(t *testing.T, _ *loopStore) (string, []string) {
			return t.TempDir(), nil
		}},
		{name: "a malformed known ID", wantErr: true, arrange: func(_ *testing.T, s *loopStore) (string, []string) {
			return filepath.Dir(s.volumesDir), []string{volA, "vol-../x"}
		}},
		{name: "a volumes directory that is a symbolic link", wantErr: true, arrange: func(t *testing.T, s *loopStore) (string, []string) {
			elsewhere := t.TempDir()
			if err := os.Rename(s.volumePath(volA), filepath.Join(elsewhere, volA+imageSuffix)); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(s.volumesDir); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(elsewhere, s.volumesDir); err != nil {
				t.Fatal(err)
			}
			return filepath.Dir(s.volumesDir), nil
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newRootStore(t)
			if err := s.CreateVolume(volA, mib); err != nil {
				t.Fatal(err)
			}
			if err := s.CreateSnapshot(snap1, volA); err != nil {
				t.Fatal(err)
			}
			stateDir, known := tc.arrange(t, s)
			removed, err := s.RemoveUnknownImages(stateDir, known)
			if (err != nil) != tc.wantErr {
				t.Fatalf("RemoveUnknownImages error = %v, want error: %v", err, tc.wantErr)
			}
			want := []string{snap1, volA}
			if tc.wantErr {
				want = nil
			}
			if !slices.Equal(removed, want) {
				t.Fatalf("RemoveUnknownImages removed %v, want %v", removed, want)
			}
			for _, id := range []string{volA, snap1} {
				path := s.snapshotPath(id)
				if id == volA {
					path = s.volumePath(id)
				}
				if gone := !exists(t, path); gone != slices.Contains(want, id) {
					t.Errorf("image of %s gone: %v, want %v", id, gone, slices.Contains(want, id))
				}
			}
		})
	}
}

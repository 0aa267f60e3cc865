package model

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/diskplane/diskplane/pkg/emulator/disks"
	"github.com/diskplane/diskplane/pkg/testutil"
)

// startOnLoopStore starts a cloud over a real loop store in dataDir, as the
// emulator does, and returns a stop function that closes it and releases the
// loop devices of its attached volumes (the local instance's root volume has
// one). stop runs when the test ends unless the test called it.
func startOnLoopStore(t *testing.T, dataDir, linkDir string) (*Cloud, func()) {
	t.Helper()
	store, err := disks.NewLoopStore(dataDir, linkDir)
	if err != nil {
		t.Fatalf("NewLoopStore: %v", err)
	}
	c, err := New(Config{DataDir: dataDir, Store: store, Now: newFakeClock().Now})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			if err := c.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			if err := store.Reconcile(nil); err != nil {
				t.Errorf("release the loop devices: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return c, stop
}

func TestUnknownImagesOnLoopStore(t *testing.T) {
	testutil.RequireRoot(t, "losetup")
	tests := []struct {
		name            string
		firstRun        bool
		removeState     bool
		wantOrphansGone bool
	}{
		{name: "saved state: the crash's images go", firstRun: true, wantOrphansGone: true},
		{name: "new data directory: images stay", firstRun: false},
		{name: "state file removed: images stay", firstRun: true, removeState: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dataDir, linkDir := t.TempDir(), t.TempDir()
			if tc.firstRun {
				c, stop := startOnLoopStore(t, dataDir, linkDir)
				v, err := c.CreateVolume(CreateVolumeInput{Zone: DefaultZones(DefaultRegion)[0].Name, Size: 1})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := c.CreateSnapshot(CreateSnapshotInput{VolumeID: v.ID}); err != nil {
					t.Fatal(err)
				}
				stop()
			}
			firstImages := imageFiles(t, dataDir)
			if tc.firstRun && len(firstImages) != 3 {
				t.Fatalf("the first run left images %v, want a root volume, a volume and a snapshot", firstImages)
			}
			if tc.removeState {
				if err := os.Remove(filepath.Join(dataDir, stateFile)); err != nil {
					t.Fatal(err)
				}
			}
			// What a crash after the store's write and before the state's
			// save leaves.
			orphans := []string{
				filepath.Join(dataDir, "volumes", orphanVolume+".img"),
				filepath.Join(dataDir, "snapshots", orphanSnapshot+".img"),
			}
			for _, p := range orphans {
				if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, make([]byte, 4096), 0o600); err != nil {
					t.Fatal(err)
				}
			}

			startOnLoopStore(t, dataDir, linkDir)

			for _, p := range orphans {
				_, err := os.Stat(p)
				if gone := os.IsNotExist(err); gone != tc.wantOrphansGone {
					t.Errorf("%s gone: %v (stat: %v), want %v", p, gone, err, tc.wantOrphansGone)
				}
			}
			for _, p := range firstImages {
				if _, err := os.Stat(p); err != nil {
					t.Errorf("the first run's image %s: %v", p, err)
				}
			}
		})
	}
}

// imageFiles lists the volume and snapshot images under dataDir.
func imageFiles(t *testing.T, dataDir string) []string {
	t.Helper()
	var files []string
	for _, sub := range []string{"volumes", "snapshots"} {
		m, err := filepath.Glob(filepath.Join(dataDir, sub, "*.img"))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	return files
}

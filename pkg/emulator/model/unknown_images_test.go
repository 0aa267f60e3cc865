package model

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/diskplane/diskplane/pkg/testutil"
)

// The IDs of images no state names, as a crash between the store's write
// and the state's save leaves them.
const (
	orphanVolume   = "vol-0000000000000000f"
	orphanSnapshot = "snap-0000000000000000f"
)

// warnMarker is part of the warning about unknown images that are kept.
const warnMarker = "without a saved state they may be someone's data"

func TestUnknownImagesAtStart(t *testing.T) {
	tests := []struct {
		name string
		// inMemory runs both clouds without a data directory.
		inMemory bool
		// firstRun starts and stops a cloud with a volume and a snapshot
		// before the cloud under test starts.
		firstRun bool
		// removeState deletes the first run's state file.
		removeState bool
		// orphans are put into the store before the cloud under test starts.
		orphans []string
		// failRemove makes the store's removal fail.
		failRemove bool
		// wantRemoved lists what the start removes; wantWarned is the count
		// of unknown images the start warns about and keeps (0: no warning).
		wantRemoved []string
		wantWarned  int
		// wantRemoval is whether the start asks the store to remove (with
		// the data directory); wantLog is text the log must hold.
		wantRemoval bool
		wantLog     string
	}{
		{name: "saved state: the unknown images go", firstRun: true, orphans: []string{orphanVolume, orphanSnapshot},
			wantRemoved: []string{orphanSnapshot, orphanVolume}, wantRemoval: true, wantLog: "Removed images a crash left"},
		{name: "saved state, nothing unknown", firstRun: true, wantRemoval: true},
		{name: "new data directory: kept and reported", orphans: []string{orphanVolume, orphanSnapshot}, wantWarned: 2},
		{name: "state file removed: kept and reported", firstRun: true, removeState: true, wantWarned: 3},
		{name: "in memory: nothing is looked at", inMemory: true, firstRun: true, orphans: []string{orphanVolume}},
		{name: "removal fails: the start goes on", firstRun: true, orphans: []string{orphanVolume}, failRemove: true,
			wantRemoval: true, wantLog: "Could not remove every image"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.inMemory {
				dir = ""
			}
			store := newFakeStore()
			if tc.firstRun {
				first := newTestCloud(t, Config{DataDir: dir, Store: store})
				vol := first.mustVolume(t, 1)
				if _, err := first.CreateSnapshot(CreateSnapshotInput{VolumeID: vol.ID}); err != nil {
					t.Fatal(err)
				}
				if err := first.Close(); err != nil {
					t.Fatal(err)
				}
			}
			if tc.removeState {
				if err := os.Remove(filepath.Join(dir, stateFile)); err != nil {
					t.Fatal(err)
				}
			}
			for _, id := range tc.orphans {
				if strings.HasPrefix(id, "snap-") {
					store.snapshots[id] = gib
				} else {
					store.volumes[id] = gib
				}
			}
			if tc.failRemove {
				store.fail("RemoveUnknownImages", errors.New("injected removal failure"))
			}
			before := store.holds()
			logs := testutil.CaptureKlog(t, 2)

			tc2 := newTestCloud(t, Config{DataDir: dir, Store: store})

			// What the store holds afterwards: everything before, less
			// what was removed, plus the new cloud's own images (a root
			// volume when the state was new), all of which the state names.
			after := store.holds()
			var gone []string
			for _, id := range before {
				if !slices.Contains(after, id) {
					gone = append(gone, id)
				}
			}
			if !slices.Equal(gone, tc.wantRemoved) {
				t.Errorf("the start removed %v, want %v", gone, tc.wantRemoved)
			}
			tc2.mu.Lock()
			known := tc2.imageIDs()
			tc2.mu.Unlock()
			for _, id := range after {
				if !slices.Contains(known, id) && !slices.Contains(before, id) {
					t.Errorf("the store holds %s, which neither the state nor the store had", id)
				}
			}
			wantCalls := []string(nil)
			if tc.wantRemoval {
				wantCalls = []string{dir}
			}
			if !slices.Equal(store.removeCalls, wantCalls) {
				t.Errorf("RemoveUnknownImages calls with state directories %q, want %q", store.removeCalls, wantCalls)
			}
			out := logs.String()
			if got := strings.Count(out, warnMarker); got != min(tc.wantWarned, 1) {
				t.Errorf("%d warnings about kept images, want %d; log:\n%s", got, min(tc.wantWarned, 1), out)
			}
			if tc.wantWarned > 0 {
				for _, want := range []string{"count=" + strconv.Itoa(tc.wantWarned), strconv.Quote(dir)} {
					if !strings.Contains(out, want) {
						t.Errorf("the warning does not say %s; log:\n%s", want, out)
					}
				}
			}
			if tc.wantLog != "" && !strings.Contains(out, tc.wantLog) {
				t.Errorf("the log does not say %q; log:\n%s", tc.wantLog, out)
			}
			if tc.inMemory && store.listedUnknown != 0 {
				t.Errorf("an in-memory cloud listed the store's images %d times", store.listedUnknown)
			}

			// Images kept once stay kept: the next start loads the state
			// this one saved, which must not take them for leftovers.
			if tc.wantWarned > 0 {
				if err := tc2.Close(); err != nil {
					t.Fatal(err)
				}
				newTestCloud(t, Config{DataDir: dir, Store: store})
				again := store.holds()
				for _, id := range before {
					if !slices.Contains(again, id) {
						t.Errorf("the next start removed %s, which the first kept", id)
					}
				}
			}
		})
	}
}

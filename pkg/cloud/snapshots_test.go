package cloud

import (
	"fmt"
	"testing"
	"time"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

func TestCreateSnapshot(t *testing.T) {
	t.Parallel()
	c, env := start(t, emulatortest.Options{})
	vol := mustCreate(t, c, "pvc-1", &CreateVolumeOptions{SizeGiB: 2})
	other := mustCreate(t, c, "pvc-2", &CreateVolumeOptions{SizeGiB: 2})

	snap, err := c.CreateSnapshot(testContext(t), "snap-1", vol.ID, &CreateSnapshotOptions{Tags: map[string]string{"team": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	if snap.Name != "snap-1" || snap.SourceVolumeID != vol.ID || snap.SizeGiB != 2 || snap.Tags["team"] != "a" {
		t.Errorf("snapshot %+v", snap)
	}
	again, err := c.CreateSnapshot(testContext(t), "snap-1", vol.ID, nil)
	if err != nil || again.ID != snap.ID {
		t.Fatalf("retry = %+v, %v; want %s", again, err, snap.ID)
	}
	if n := env.Calls("CreateSnapshot"); n != 1 {
		t.Errorf("%d CreateSnapshot calls, want 1", n)
	}
	tests := []struct {
		name, snapName, volume string
		want                   error
	}{
		{"name used for another volume", "snap-1", other.ID, ErrAlreadyExists},
		{"missing volume", "snap-2", "vol-0123456789abcdef0", ErrNotFound},
		{"no name", "", vol.ID, ErrInvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.CreateSnapshot(testContext(t), tc.snapName, tc.volume, nil)
			wantErr(t, err, tc.want)
		})
	}
}

func TestSnapshotLookupsAndDelete(t *testing.T) {
	t.Parallel()
	c, _ := start(t, emulatortest.Options{})
	vol := mustCreate(t, c, "pvc-1", &CreateVolumeOptions{SizeGiB: 1})
	snap, err := c.CreateSnapshot(testContext(t), "snap-1", vol.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	done, err := c.WaitForSnapshot(testContext(t), snap.ID)
	if err != nil || !done.Ready || done.State != snapshotCompleted {
		t.Fatalf("WaitForSnapshot = %+v, %v", done, err)
	}
	byID, err := c.GetSnapshot(testContext(t), snap.ID)
	if err != nil || byID.ID != snap.ID || !byID.Ready {
		t.Errorf("GetSnapshot = %+v, %v", byID, err)
	}
	byName, err := c.GetSnapshotByName(testContext(t), "snap-1")
	if err != nil || byName.ID != snap.ID {
		t.Errorf("GetSnapshotByName = %+v, %v", byName, err)
	}
	wantErr(t, c.DeleteSnapshot(testContext(t), snap.ID), nil)
	tests := []struct {
		name string
		call func() error
	}{
		{"delete again", func() error { return c.DeleteSnapshot(testContext(t), snap.ID) }},
		{"get deleted", func() error { _, err := c.GetSnapshot(testContext(t), snap.ID); return err }},
		{"get by gone name", func() error { _, err := c.GetSnapshotByName(testContext(t), "snap-1"); return err }},
		{"get malformed", func() error { _, err := c.GetSnapshot(testContext(t), "snap-bogus"); return err }},
		{"wait for missing", func() error { _, err := c.WaitForSnapshot(testContext(t), "snap-0123456789abcdef0"); return err }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { wantErr(t, tc.call(), ErrNotFound) })
	}
}

func TestWaitForSnapshotWaits(t *testing.T) {
	t.Parallel()
	c, _ := startEmulator(t, emulatortest.Options{Latencies: model.Latencies{Snapshot: 300 * time.Millisecond}},
		"completes a snapshot as CreateSnapshot answers (never pending)")
	vol := mustCreate(t, c, "pvc-1", &CreateVolumeOptions{SizeGiB: 1})
	snap, err := c.CreateSnapshot(testContext(t), "snap-1", vol.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Ready {
		t.Fatal("a snapshot is ready at once even with a 300ms snapshot latency")
	}
	done, err := c.WaitForSnapshot(testContext(t), snap.ID)
	if err != nil || !done.Ready {
		t.Fatalf("WaitForSnapshot = %+v, %v", done, err)
	}
}

func TestListSnapshotsPaginates(t *testing.T) {
	t.Parallel()
	c, _ := start(t, emulatortest.Options{})
	a := mustCreate(t, c, "pvc-a", &CreateVolumeOptions{SizeGiB: 1})
	b := mustCreate(t, c, "pvc-b", &CreateVolumeOptions{SizeGiB: 1})
	for i := range 7 {
		src := a.ID
		if i%2 == 1 {
			src = b.ID
		}
		if _, err := c.CreateSnapshot(testContext(t), fmt.Sprintf("snap-%d", i), src, nil); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name   string
		source string
		size   int32
		want   int
	}{
		{"all, default page", "", 0, 7},
		{"all, pages of 1", "", 1, 7},
		{"all, pages of 3", "", 3, 7},
		{"all, pages of 6", "", 6, 7},
		{"of one volume", a.ID, 0, 4},
		{"of one volume, pages of 2", a.ID, 2, 4},
		{"of a missing volume", "vol-0123456789abcdef0", 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			seen := map[string]bool{}
			token := ""
			for pages := 1; ; pages++ {
				page, err := c.ListSnapshots(testContext(t), SnapshotListOptions{SourceVolumeID: tc.source, MaxResults: tc.size, NextToken: token})
				if err != nil {
					t.Fatal(err)
				}
				if tc.size > 0 && len(page.Snapshots) > int(tc.size) {
					t.Fatalf("page of %d, asked for %d", len(page.Snapshots), tc.size)
				}
				for _, s := range page.Snapshots {
					if seen[s.ID] {
						t.Fatalf("%s listed twice", s.ID)
					}
					if tc.source != "" && s.SourceVolumeID != tc.source {
						t.Errorf("%s is a snapshot of %s", s.ID, s.SourceVolumeID)
					}
					seen[s.ID] = true
				}
				if token = page.NextToken; token == "" {
					break
				}
				if pages > 20 {
					t.Fatal("pagination does not end")
				}
			}
			if len(seen) != tc.want {
				t.Errorf("listed %d snapshots, want %d", len(seen), tc.want)
			}
		})
	}
	_, err := c.ListSnapshots(testContext(t), SnapshotListOptions{NextToken: "%%"})
	wantErr(t, err, ErrInvalidArgument)
}

func TestUpdateTags(t *testing.T) {
	t.Parallel()
	c, _ := start(t, emulatortest.Options{})
	vol := mustCreate(t, c, "pvc-1", &CreateVolumeOptions{SizeGiB: 1, Tags: map[string]string{"old": "1", "keep": "2"}})
	if err := c.UpdateTags(testContext(t), vol.ID, map[string]string{"new": "3"}, []string{"old"}); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetVolume(testContext(t), vol.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Tags["new"] != "3" || got.Tags["keep"] != "2" || got.Tags[TagVolumeName] != "pvc-1" {
		t.Errorf("tags %v", got.Tags)
	}
	if _, ok := got.Tags["old"]; ok {
		t.Errorf("tag old was not removed: %v", got.Tags)
	}
	wantErr(t, c.UpdateTags(testContext(t), "vol-0123456789abcdef0", map[string]string{"a": "b"}, nil), ErrNotFound)
}

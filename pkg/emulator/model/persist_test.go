package model

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestStateSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	store := newFakeStore()
	first := newTestCloud(t, Config{DataDir: dir, Store: store, Instances: []InstanceSpec{
		{Type: "m5.large", Local: true},
		{ID: "i-0123456789abcdef0", Type: "t3.medium", Zone: "us-east-1b"},
	}})
	local := first.local(t)
	attached := first.mustVolume(t, 4)
	if _, err := first.AttachVolume(AttachVolumeInput{VolumeID: attached.ID, InstanceID: local.ID, Device: "/dev/xvdba"}); err != nil {
		t.Fatal(err)
	}
	first.describe(t, attached.ID)
	loose := first.mustVolume(t, 8)
	if err := first.CreateTags([]string{loose.ID}, map[string]string{"k": "v"}, false); err != nil {
		t.Fatal(err)
	}
	snap, err := first.CreateSnapshot(CreateSnapshotInput{VolumeID: loose.ID})
	if err != nil {
		t.Fatal(err)
	}
	token, err := first.CreateVolume(CreateVolumeInput{Zone: local.Zone, Size: 2, ClientToken: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}

	// A crash in the middle of a later write leaves a torn temporary file
	// next to the saved state; the restart must load the saved state and
	// remove the torn one.
	if err := os.WriteFile(filepath.Join(dir, stateFile+".tmp-1234"), []byte(`{"version": 1, "volu`), 0o600); err != nil {
		t.Fatal(err)
	}

	// The same configuration again: same instances, same resources, and the
	// store is told which volumes must still have a device.
	second := newTestCloud(t, Config{DataDir: dir, Store: store, Instances: []InstanceSpec{
		{Type: "m5.large", Local: true},
		{ID: "i-0123456789abcdef0", Type: "t3.medium", Zone: "us-east-1b"},
	}})
	if got := second.local(t); got.ID != local.ID {
		t.Fatalf("local instance %s after restart, want %s", got.ID, local.ID)
	}
	if n := len(second.Instances()); n != 2 {
		t.Fatalf("%d instances after restart, want 2", n)
	}
	if got := second.describe(t, attached.ID); got.State != VolumeInUse || got.Attachments[0].InstanceID != local.ID {
		t.Fatalf("attached volume after restart: %+v", got)
	}
	if got := second.describe(t, loose.ID); got.Tags["k"] != "v" {
		t.Fatalf("tags after restart: %+v", got.Tags)
	}
	if _, err := second.DescribeSnapshots(SnapshotQuery{Query: Query{IDs: []string{snap.ID}}}); err != nil {
		t.Fatalf("snapshot after restart: %v", err)
	}
	again, err := second.CreateVolume(CreateVolumeInput{Zone: local.Zone, Size: 2, ClientToken: "tok"})
	if err != nil || again.ID != token.ID {
		t.Fatalf("client token after restart: %s, %v; want %s", again.ID, err, token.ID)
	}
	if last := store.reconciled[len(store.reconciled)-1]; !slices.Equal(last, []string{attached.ID}) {
		t.Fatalf("reconciled %v, want [%s]", last, attached.ID)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Fatalf("temporary file left behind: %s", e.Name())
		}
	}
}

func TestLoadRejectsBadState(t *testing.T) {
	tests := []struct {
		name    string
		content string
		want    string
	}{
		{name: "not JSON", content: "{", want: "decode emulator state"},
		{name: "other version", content: `{"version": 99}`, want: "format version 99"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, stateFile), []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := New(Config{DataDir: dir, Store: newFakeStore()})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestConcurrentWritesAllLand(t *testing.T) {
	dir := t.TempDir()
	tc := newTestCloud(t, Config{DataDir: dir})
	zone := tc.local(t).Zone
	var wg sync.WaitGroup
	ids := make([]string, 20)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := tc.CreateVolume(CreateVolumeInput{Zone: zone, Size: 1})
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = v.ID
		}()
	}
	wg.Wait()
	if err := tc.Close(); err != nil {
		t.Fatal(err)
	}
	// Every acknowledged create is on disk.
	st, fromFile, err := (&Cloud{persist: newPersister(dir, nil)}).load()
	if err != nil || !fromFile {
		t.Fatalf("load = from file %v, %v; want the saved state", fromFile, err)
	}
	for _, id := range ids {
		if st.Volumes[id] == nil {
			t.Fatalf("volume %s missing from the saved state", id)
		}
	}
}

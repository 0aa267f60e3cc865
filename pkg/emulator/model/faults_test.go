package model

import (
	"testing"
	"time"
)

func TestClientTokenLifetime(t *testing.T) {
	tc := newTestCloud(t, Config{ClientTokenTTL: time.Hour})
	in := CreateVolumeInput{Zone: tc.local(t).Zone, Size: 2, ClientToken: "tok"}
	first, err := tc.CreateVolume(in)
	if err != nil {
		t.Fatal(err)
	}
	tc.clock.Advance(59 * time.Minute)
	again, err := tc.CreateVolume(in)
	if err != nil || again.ID != first.ID {
		t.Fatalf("within the lifetime: %s, %v; want %s", again.ID, err, first.ID)
	}
	if _, err := tc.CreateVolume(CreateVolumeInput{Zone: in.Zone, Size: 3, ClientToken: "tok"}); code(err) != CodeIdempotentParameterMismatch {
		t.Fatalf("other parameters: %v, want %s", err, CodeIdempotentParameterMismatch)
	}
	tc.clock.Advance(time.Minute)
	fresh, err := tc.CreateVolume(CreateVolumeInput{Zone: in.Zone, Size: 3, ClientToken: "tok"})
	if err != nil || fresh.ID == first.ID {
		t.Fatalf("after the lifetime the token is new: %s, %v", fresh.ID, err)
	}
}

func TestClientTokenOfDeletedVolume(t *testing.T) {
	tc := newTestCloud(t, Config{Latencies: Latencies{VolumeDelete: time.Second}})
	in := CopyVolumesInput{SourceVolumeID: tc.mustVolume(t, 2).ID, ClientToken: "copy"}
	made, err := tc.CopyVolumes(in)
	if err != nil {
		t.Fatal(err)
	}
	tc.describe(t, made[0].ID)
	if err := tc.DeleteVolume(made[0].ID, false); err != nil {
		t.Fatal(err)
	}
	// Being deleted, the volume still exists: the token answers it.
	if again, err := tc.CopyVolumes(in); err != nil || again[0].ID != made[0].ID || again[0].State != VolumeDeleting {
		t.Fatalf("token of a deleting volume: %+v, %v", again, err)
	}
	tc.clock.Advance(time.Second)
	if _, err := tc.CopyVolumes(in); code(err) != CodeIdempotentParameterMismatch {
		t.Fatalf("token of a deleted volume: %v, want %s", err, CodeIdempotentParameterMismatch)
	}
}

func TestAsyncFailures(t *testing.T) {
	failing := map[string]bool{}
	tc := newTestCloud(t, Config{Latencies: slow, FailAsync: func(action, kms string) bool {
		return failing[action] || kms == "bad-key"
	}})
	zone := tc.local(t).Zone

	bad, err := tc.CreateVolume(CreateVolumeInput{Zone: zone, Size: 2, Encrypted: bptr(true), KmsKeyID: "bad-key", ClientToken: "t"})
	if err != nil || bad.State != VolumeCreating {
		t.Fatalf("CreateVolume with an unusable key: %+v, %v (the request itself succeeds)", bad, err)
	}
	tc.clock.Advance(slow.VolumeCreate)
	if got := tc.describe(t, bad.ID).State; got != VolumeError {
		t.Fatalf("state %s, want error", got)
	}
	tc.clock.Advance(slow.VolumeDelete)
	if _, err := tc.DescribeVolumes(Query{IDs: []string{bad.ID}}); code(err) != CodeInvalidVolumeNotFound {
		t.Fatalf("failed volume: %v, want it gone", err)
	}
	if tc.store.size(bad.ID) != 0 {
		t.Error("the store still holds the failed volume")
	}

	good := tc.mustVolume(t, 2)
	tc.clock.Advance(slow.VolumeCreate)
	failing["CreateSnapshot"] = true
	snap, err := tc.CreateSnapshot(CreateSnapshotInput{VolumeID: good.ID})
	if err != nil {
		t.Fatal(err)
	}
	tc.clock.Advance(slow.Snapshot)
	page, err := tc.DescribeSnapshots(SnapshotQuery{Query: Query{IDs: []string{snap.ID}}})
	if err != nil {
		t.Fatal(err)
	}
	if s := page.Items[0]; s.State != SnapshotError || s.StateMessage == "" {
		t.Fatalf("snapshot %+v, want error with a message", s)
	}
	if err := tc.DeleteSnapshot(snap.ID, false); err != nil {
		t.Fatalf("a failed snapshot is deleted like any other: %v", err)
	}
}

func TestStaleReads(t *testing.T) {
	window := 10 * time.Second
	tc := newTestCloud(t, Config{StaleWindow: func() time.Duration { return window }})
	local := tc.local(t)
	v := tc.mustVolume(t, 2)
	tc.clock.Advance(time.Second)
	if _, err := tc.AttachVolume(AttachVolumeInput{VolumeID: v.ID, InstanceID: local.ID, Device: "/dev/xvdba"}); err != nil {
		t.Fatal(err)
	}
	if err := tc.CreateTags([]string{v.ID}, map[string]string{"k": "v"}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.ModifyVolume(ModifyVolumeInput{VolumeID: v.ID, Size: 3}); err != nil {
		t.Fatal(err)
	}
	tc.clock.Advance(time.Second)

	now, _ := tc.DescribeVolumes(Query{IDs: []string{v.ID}})
	if a := now.Items[0].Attachments; len(a) != 1 || now.Items[0].Tags["k"] != "v" {
		t.Fatalf("a fresh read: %+v", now.Items[0])
	}
	stale, err := tc.DescribeVolumes(Query{IDs: []string{v.ID}, Lag: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if s := stale.Items[0]; len(s.Attachments) != 0 || s.State != VolumeAvailable || s.Tags["k"] != "" {
		t.Fatalf("a read 1.5 s stale sees the volume before the attach and the tag: %+v", s)
	}
	if _, err := tc.DescribeVolumesModifications(Query{IDs: []string{v.ID}, Lag: 1500 * time.Millisecond}); code(err) != CodeInvalidVolumeModNotFound {
		t.Fatalf("a stale read of the modification: %v, want it not there yet", err)
	}
	inst, err := tc.DescribeInstances(Query{IDs: []string{local.ID}, Lag: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(inst.Items[0].BlockDevices); n != 1 {
		t.Fatalf("a stale read of the instance shows %d block devices, want only the root", n)
	}
	tags, err := tc.DescribeTags(Query{Filters: []Filter{{Name: "key", Values: []string{"k"}}}, Lag: 1500 * time.Millisecond})
	if err != nil || len(tags.Items) != 0 {
		t.Fatalf("a stale read of the tags: %+v, %v", tags.Items, err)
	}
	// Older than the history reaches: the oldest state kept.
	tc.clock.Advance(time.Minute)
	old, _ := tc.DescribeVolumes(Query{IDs: []string{v.ID}, Lag: time.Hour})
	if len(old.Items[0].Attachments) != 1 {
		t.Fatalf("a minute later even the stalest read sees the attachment: %+v", old.Items[0])
	}
	if n := tc.pastStates(); n > 2 {
		t.Errorf("%d past states kept after a quiet minute, want at most 2", n)
	}
}

func TestStaleReadsOffKeepNothing(t *testing.T) {
	tc := newTestCloud(t, Config{})
	v := tc.mustVolume(t, 2)
	if err := tc.CreateTags([]string{v.ID}, map[string]string{"k": "v"}, false); err != nil {
		t.Fatal(err)
	}
	page, _ := tc.DescribeVolumes(Query{IDs: []string{v.ID}, Lag: time.Minute})
	if page.Items[0].Tags["k"] != "v" || tc.pastStates() != 0 {
		t.Fatalf("without a stale window reads are fresh and nothing is kept: %+v, %d states", page.Items[0], tc.pastStates())
	}
}

func TestAuditSharedVolumes(t *testing.T) {
	tc := newTestCloud(t, Config{Instances: []InstanceSpec{{Type: "m5.large"}, {Type: "m5.large"}}})
	ins := tc.Instances()
	v, err := tc.CreateVolume(CreateVolumeInput{Zone: ins[0].Zone, Size: 4, Type: "io2", Iops: i32(100), MultiAttach: bptr(true)})
	if err != nil {
		t.Fatal(err)
	}
	tc.describe(t, v.ID)
	for _, in := range ins {
		if _, err := tc.AttachVolume(AttachVolumeInput{VolumeID: v.ID, InstanceID: in.ID, Device: "/dev/xvdbb"}); err != nil {
			t.Fatal(err)
		}
	}
	if got := tc.Audit().SharedVolumes; got[v.ID] != 2 || len(got) != 1 {
		t.Fatalf("audit %v, want %s attached to 2 instances", got, v.ID)
	}
}

// pastStates is how many past states the cloud keeps for stale reads.
func (tc *testCloud) pastStates() int {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return len(tc.past.worlds)
}

package model

import (
	"errors"
	"testing"
	"time"
)

// slow are latencies long enough to see every transitional state.
var slow = Latencies{
	VolumeCreate: 2 * time.Second,
	VolumeDelete: 2 * time.Second,
	Attach:       3 * time.Second,
	Detach:       3 * time.Second,
	Snapshot:     10 * time.Second,
	Modify:       4 * time.Second,
	Optimize:     10 * time.Second,
}

func TestVolumeLifecycle(t *testing.T) {
	tc := newTestCloud(t, Config{Latencies: slow})
	zone := tc.local(t).Zone
	v, err := tc.CreateVolume(CreateVolumeInput{Zone: zone, Size: 4, Type: "gp3"})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		advance time.Duration
		want    VolumeState
	}{
		{0, VolumeCreating},
		{1999 * time.Millisecond, VolumeCreating},
		{time.Millisecond, VolumeAvailable},
	}
	for _, s := range steps {
		tc.clock.Advance(s.advance)
		if got := tc.describe(t, v.ID).State; got != s.want {
			t.Fatalf("after +%v: state %s, want %s", s.advance, got, s.want)
		}
	}
	if tc.store.size(v.ID) != 4*gib {
		t.Fatalf("store size = %d, want 4 GiB", tc.store.size(v.ID))
	}
	if err := tc.DeleteVolume(v.ID, false); err != nil {
		t.Fatal(err)
	}
	if got := tc.describe(t, v.ID).State; got != VolumeDeleting {
		t.Fatalf("state %s, want deleting", got)
	}
	if err := tc.DeleteVolume(v.ID, false); err != nil {
		t.Fatalf("deleting a deleting volume: %v", err)
	}
	tc.clock.Advance(2 * time.Second)
	if _, err := tc.DescribeVolumes(Query{IDs: []string{v.ID}}); code(err) != CodeInvalidVolumeNotFound {
		t.Fatalf("deleted volume: %v", err)
	}
	if tc.store.size(v.ID) != 0 {
		t.Fatal("store still holds the deleted volume")
	}
}

func TestAttachDetachOnHost(t *testing.T) {
	tc := newTestCloud(t, Config{Latencies: slow})
	local := tc.local(t)
	tc.clock.Advance(slow.VolumeCreate)
	v := tc.mustVolume(t, 4)
	tc.clock.Advance(slow.VolumeCreate)

	a, err := tc.AttachVolume(AttachVolumeInput{VolumeID: v.ID, InstanceID: local.ID, Device: "/dev/xvdba"})
	if err != nil {
		t.Fatal(err)
	}
	if a.State != AttachmentAttaching || tc.describe(t, v.ID).State != VolumeInUse {
		t.Fatalf("attach answered %s, volume %s", a.State, tc.describe(t, v.ID).State)
	}
	if tc.store.isAttached(v.ID) {
		t.Fatal("device exists while attaching")
	}
	tc.clock.Advance(slow.Attach)
	got := tc.describe(t, v.ID)
	if got.Attachments[0].State != AttachmentAttached || !tc.store.isAttached(v.ID) || got.Attachments[0].HostDevice == "" {
		t.Fatalf("after attach latency: %+v, device %v", got.Attachments[0], tc.store.isAttached(v.ID))
	}

	// A busy device keeps the detach in "detaching" until it is free.
	tc.store.setBusy(v.ID, true)
	if _, err := tc.DetachVolume(DetachVolumeInput{VolumeID: v.ID}); err != nil {
		t.Fatal(err)
	}
	tc.clock.Advance(slow.Detach + time.Minute)
	if got := tc.describe(t, v.ID); got.State != VolumeInUse || got.Attachments[0].State != AttachmentDetaching {
		t.Fatalf("busy device: %s / %+v", got.State, got.Attachments)
	}
	tc.store.setBusy(v.ID, false)
	if got := tc.describe(t, v.ID); got.State != VolumeAvailable || len(got.Attachments) != 0 || tc.store.isAttached(v.ID) {
		t.Fatalf("freed device: %s / %+v", got.State, got.Attachments)
	}
}

func TestForcedDetachOfBusyDevice(t *testing.T) {
	tc := newTestCloud(t, Config{})
	local := tc.local(t)
	v := tc.mustVolume(t, 4)
	if _, err := tc.AttachVolume(AttachVolumeInput{VolumeID: v.ID, InstanceID: local.ID, Device: "/dev/xvdba"}); err != nil {
		t.Fatal(err)
	}
	tc.describe(t, v.ID)
	tc.store.setBusy(v.ID, true)
	if _, err := tc.DetachVolume(DetachVolumeInput{VolumeID: v.ID}); err != nil {
		t.Fatal(err)
	}
	if got := tc.describe(t, v.ID); got.Attachments[0].State != AttachmentDetaching {
		t.Fatalf("busy device detached without force: %+v", got.Attachments)
	}
	a, err := tc.DetachVolume(DetachVolumeInput{VolumeID: v.ID, Force: true})
	if err != nil || !a.Force {
		t.Fatalf("forced detach: %+v, %v", a, err)
	}
	if got := tc.describe(t, v.ID); got.State != VolumeAvailable {
		t.Fatalf("forced detach left %s", got.State)
	}
}

func TestStoreFailuresAreRetried(t *testing.T) {
	tc := newTestCloud(t, Config{})
	local := tc.local(t)
	v := tc.mustVolume(t, 4)
	tc.store.fail("Attach", errors.New("no free loop device"))
	if _, err := tc.AttachVolume(AttachVolumeInput{VolumeID: v.ID, InstanceID: local.ID, Device: "/dev/xvdba"}); err != nil {
		t.Fatal(err)
	}
	// The first advance met the failure; the attachment waits, then the
	// next advance succeeds.
	got := tc.describe(t, v.ID)
	if got.Attachments[0].State != AttachmentAttached {
		got = tc.describe(t, v.ID)
	}
	if got.Attachments[0].State != AttachmentAttached || !tc.store.isAttached(v.ID) {
		t.Fatalf("attachment after a store failure: %+v", got.Attachments[0])
	}

	tc.store.fail("CreateVolume", errors.New("disk full"))
	if _, err := tc.CreateVolume(CreateVolumeInput{Zone: local.Zone, Size: 1}); err == nil || code(err) == "" {
		t.Fatalf("CreateVolume with a failing store: %v", err)
	}
	if n := len(tc.Volumes()); n != 2 {
		t.Fatalf("a failed create left a volume behind: %d volumes", n)
	}
}

func TestSnapshotProgress(t *testing.T) {
	tc := newTestCloud(t, Config{Latencies: slow})
	tc.clock.Advance(time.Second)
	v := tc.mustVolume(t, 4)
	tc.clock.Advance(slow.VolumeCreate)
	s, err := tc.CreateSnapshot(CreateSnapshotInput{VolumeID: v.ID, Description: "d"})
	if err != nil {
		t.Fatal(err)
	}
	if s.State != SnapshotPending || s.Progress != 0 || s.VolumeSize != 4 {
		t.Fatalf("new snapshot %+v", s)
	}
	steps := []struct {
		advance  time.Duration
		state    SnapshotState
		progress int
	}{
		{5 * time.Second, SnapshotPending, 50},
		{4 * time.Second, SnapshotPending, 90},
		{time.Second, SnapshotCompleted, 100},
	}
	for _, st := range steps {
		tc.clock.Advance(st.advance)
		page, err := tc.DescribeSnapshots(SnapshotQuery{Query: Query{IDs: []string{s.ID}}})
		if err != nil {
			t.Fatal(err)
		}
		got := page.Items[0]
		if got.State != st.state || got.Progress != st.progress {
			t.Fatalf("after +%v: %s %d%%, want %s %d%%", st.advance, got.State, got.Progress, st.state, st.progress)
		}
	}
}

func TestModificationPhases(t *testing.T) {
	tc := newTestCloud(t, Config{Latencies: slow})
	v := tc.mustVolume(t, 10)
	tc.clock.Advance(slow.VolumeCreate)
	m, err := tc.ModifyVolume(ModifyVolumeInput{VolumeID: v.ID, Size: 20, Iops: i32(4000)})
	if err != nil {
		t.Fatal(err)
	}
	if m.State != ModificationModifying || m.Original.Size != 10 || m.Target.Size != 20 || m.Target.Iops != 4000 {
		t.Fatalf("modification %+v", m)
	}
	if _, err := tc.ModifyVolume(ModifyVolumeInput{VolumeID: v.ID, Size: 30}); code(err) != CodeIncorrectModificationState {
		t.Fatalf("second modification while modifying: %v", err)
	}
	if got := tc.describe(t, v.ID); got.Size != 10 || tc.store.size(v.ID) != 10*gib {
		t.Fatalf("size changed while modifying: %d", got.Size)
	}
	tc.clock.Advance(slow.Modify)
	if got := tc.describe(t, v.ID); got.Size != 20 || got.Iops != 4000 || tc.store.size(v.ID) != 20*gib {
		t.Fatalf("optimizing volume: %+v, store %d", got, tc.store.size(v.ID))
	}
	tc.clock.Advance(slow.Optimize / 2)
	page, err := tc.DescribeVolumesModifications(Query{IDs: []string{v.ID}})
	if err != nil {
		t.Fatal(err)
	}
	if got := page.Items[0]; got.State != ModificationOptimizing || got.Progress != 50 {
		t.Fatalf("half-way: %+v", got)
	}
	if _, err := tc.ModifyVolume(ModifyVolumeInput{VolumeID: v.ID, Size: 30}); code(err) != CodeIncorrectModificationState {
		t.Fatalf("modification while optimizing: %v", err)
	}
	tc.clock.Advance(slow.Optimize / 2)
	page, _ = tc.DescribeVolumesModifications(Query{IDs: []string{v.ID}})
	if got := page.Items[0]; got.State != ModificationCompleted || got.Progress != 100 || got.EndTime.IsZero() {
		t.Fatalf("completed: %+v", got)
	}
}

func TestModificationBudget(t *testing.T) {
	tc := newTestCloud(t, Config{ModificationsPerDay: 2})
	v := tc.mustVolume(t, 10)
	for size := int32(11); size <= 12; size++ {
		if _, err := tc.ModifyVolume(ModifyVolumeInput{VolumeID: v.ID, Size: size}); err != nil {
			t.Fatalf("modification to %d: %v", size, err)
		}
		tc.describe(t, v.ID)
	}
	if _, err := tc.ModifyVolume(ModifyVolumeInput{VolumeID: v.ID, Size: 13}); code(err) != CodeVolumeModificationRateExceeded {
		t.Fatalf("third modification in a day: %v", err)
	}
	tc.clock.Advance(24 * time.Hour)
	if _, err := tc.ModifyVolume(ModifyVolumeInput{VolumeID: v.ID, Size: 13}); err != nil {
		t.Fatalf("modification a day later: %v", err)
	}
}

func TestStuckAttachment(t *testing.T) {
	stuck := map[string]bool{}
	tc := newTestCloud(t, Config{StickAttach: func(id string) bool { return stuck[id] }})
	local := tc.local(t)
	v := tc.mustVolume(t, 4)
	stuck[v.ID] = true
	if _, err := tc.AttachVolume(AttachVolumeInput{VolumeID: v.ID, InstanceID: local.ID, Device: "/dev/xvdba"}); err != nil {
		t.Fatal(err)
	}
	tc.clock.Advance(time.Hour)
	if got := tc.describe(t, v.ID); got.Attachments[0].State != AttachmentAttaching || tc.store.isAttached(v.ID) {
		t.Fatalf("stuck attachment moved on: %+v", got.Attachments[0])
	}
	if n := tc.ReleaseStuckAttachments(); n != 1 {
		t.Fatalf("released %d, want 1", n)
	}
	if got := tc.describe(t, v.ID); got.Attachments[0].State != AttachmentAttached {
		t.Fatalf("released attachment: %+v", got.Attachments[0])
	}
}

func TestBackgroundLoopAttachesWithoutCalls(t *testing.T) {
	// Real clock: the loop must make the device appear although nobody asks.
	store := newFakeStore()
	c, err := New(Config{Store: store, Latencies: Latencies{Attach: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	in, _, _ := c.LocalInstance()
	v, err := c.CreateVolume(CreateVolumeInput{Zone: in.Zone, Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.DescribeVolumes(Query{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AttachVolume(AttachVolumeInput{VolumeID: v.ID, InstanceID: in.ID, Device: "/dev/sdf"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !store.isAttached(v.ID) {
		if time.Now().After(deadline) {
			t.Fatal("the background loop never attached the device")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

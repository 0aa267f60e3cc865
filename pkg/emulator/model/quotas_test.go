package model

import (
	"maps"
	"reflect"
	"strings"
	"testing"
)

// root is the size of the local instance's gp3 root volume, which counts
// against the gp3 quota like any other volume.
const root = 8

// quotaCloud is a test cloud with slow latencies (so creating, deleting and
// modifying states last until the clock moves) and the given quotas. Its
// only volume is the root volume.
func quotaCloud(t *testing.T, q Quotas) *testCloud {
	t.Helper()
	tc := newTestCloud(t, Config{Latencies: slow, Quotas: q})
	if vols := tc.Volumes(); len(vols) != 1 || !vols[0].Root || vols[0].Type != "gp3" || vols[0].Size != root {
		t.Fatalf("want one %d GiB gp3 root volume, have %+v", root, vols)
	}
	return tc
}

// ready creates an available volume of type and size.
func (tc *testCloud) ready(t *testing.T, typ string, size int32) Volume {
	t.Helper()
	in := CreateVolumeInput{Zone: tc.local(t).Zone, Size: size, Type: typ}
	if typ == "io2" || typ == "io1" {
		in.Iops = i32(100)
	}
	v, err := tc.CreateVolume(in)
	if err != nil {
		t.Fatalf("CreateVolume(%s, %d GiB): %v", typ, size, err)
	}
	tc.clock.Advance(slow.VolumeCreate)
	return tc.describe(t, v.ID)
}

func TestStorageQuota(t *testing.T) {
	gp3 := func(size int32) CreateVolumeInput { return CreateVolumeInput{Size: size, Type: "gp3"} }
	tests := []struct {
		name   string
		quotas Quotas
		// setup makes the volumes already in the region; act is the request
		// under test.
		setup func(t *testing.T, tc *testCloud)
		act   func(t *testing.T, tc *testCloud) error
		want  string
	}{
		{
			name:   "create up to the quota exactly",
			quotas: Quotas{StorageTiB: map[string]int64{"gp3": 1}},
			setup:  func(t *testing.T, tc *testCloud) { tc.ready(t, "gp3", 1000-root) },
			act:    func(t *testing.T, tc *testCloud) error { return tc.create(t, gp3(24)) },
		},
		{
			name:   "create over the quota",
			quotas: Quotas{StorageTiB: map[string]int64{"gp3": 1}},
			setup:  func(t *testing.T, tc *testCloud) { tc.ready(t, "gp3", 1000-root) },
			act:    func(t *testing.T, tc *testCloud) error { return tc.create(t, gp3(25)) },
			want:   CodeVolumeLimitExceeded,
		},
		{
			name:   "a single volume larger than the quota",
			quotas: Quotas{StorageTiB: map[string]int64{"gp3": 1}},
			act:    func(t *testing.T, tc *testCloud) error { return tc.create(t, gp3(1025)) },
			want:   CodeVolumeLimitExceeded,
		},
		{
			name:   "other volume types have their own quota",
			quotas: Quotas{StorageTiB: map[string]int64{"gp3": 1}},
			setup:  func(t *testing.T, tc *testCloud) { tc.ready(t, "gp3", 1024-root) },
			act: func(t *testing.T, tc *testCloud) error {
				return tc.create(t, CreateVolumeInput{Size: 2048, Type: "gp2"})
			},
		},
		{
			name:   "the default type counts against gp2",
			quotas: Quotas{StorageTiB: map[string]int64{"gp2": 0}},
			act:    func(t *testing.T, tc *testCloud) error { return tc.create(t, CreateVolumeInput{Size: 1}) },
			want:   CodeVolumeLimitExceeded,
		},
		{
			name:   "a creating volume counts",
			quotas: Quotas{StorageTiB: map[string]int64{"gp3": 1}},
			setup: func(t *testing.T, tc *testCloud) {
				if err := tc.create(t, gp3(1024-root)); err != nil {
					t.Fatal(err)
				}
			},
			act:  func(t *testing.T, tc *testCloud) error { return tc.create(t, gp3(1)) },
			want: CodeVolumeLimitExceeded,
		},
		{
			name:   "a deleting volume still counts",
			quotas: Quotas{StorageTiB: map[string]int64{"gp3": 1}},
			setup: func(t *testing.T, tc *testCloud) {
				if err := tc.DeleteVolume(tc.ready(t, "gp3", 1024-root).ID, false); err != nil {
					t.Fatal(err)
				}
			},
			act:  func(t *testing.T, tc *testCloud) error { return tc.create(t, gp3(1)) },
			want: CodeVolumeLimitExceeded,
		},
		{
			name:   "a deleted volume no longer counts",
			quotas: Quotas{StorageTiB: map[string]int64{"gp3": 1}},
			setup: func(t *testing.T, tc *testCloud) {
				if err := tc.DeleteVolume(tc.ready(t, "gp3", 1024-root).ID, false); err != nil {
					t.Fatal(err)
				}
				tc.clock.Advance(slow.VolumeDelete)
			},
			act: func(t *testing.T, tc *testCloud) error { return tc.create(t, gp3(1024-root)) },
		},
		{
			name:   "a negative quota is no limit",
			quotas: Quotas{StorageTiB: map[string]int64{"gp3": -1}},
			setup:  func(t *testing.T, tc *testCloud) { tc.ready(t, "gp3", 65536) },
			act:    func(t *testing.T, tc *testCloud) error { return tc.create(t, gp3(65536)) },
		},
		{
			name:   "EC2's default io2 quota is 20 TiB",
			quotas: Quotas{},
			setup:  func(t *testing.T, tc *testCloud) { tc.ready(t, "io2", 20*1024) },
			act: func(t *testing.T, tc *testCloud) error {
				return tc.create(t, CreateVolumeInput{Size: 4, Type: "io2", Iops: i32(100)})
			},
			want: CodeVolumeLimitExceeded,
		},
		{
			name:   "a dry run over the quota reports the quota",
			quotas: Quotas{StorageTiB: map[string]int64{"gp3": 1}},
			act: func(t *testing.T, tc *testCloud) error {
				in := gp3(2048)
				in.DryRun = true
				return tc.create(t, in)
			},
			want: CodeVolumeLimitExceeded,
		},
		{
			name:   "a volume from a snapshot counts",
			quotas: Quotas{StorageTiB: map[string]int64{"gp3": 1}},
			act: func(t *testing.T, tc *testCloud) error {
				snap, err := tc.CreateSnapshot(CreateSnapshotInput{VolumeID: tc.ready(t, "gp3", 600).ID})
				if err != nil {
					t.Fatal(err)
				}
				tc.clock.Advance(slow.Snapshot)
				return tc.create(t, CreateVolumeInput{SnapshotID: snap.ID, Type: "gp3"})
			},
			want: CodeVolumeLimitExceeded,
		},
		{
			name:   "a copy over the quota",
			quotas: Quotas{StorageTiB: map[string]int64{"gp3": 1}},
			act: func(t *testing.T, tc *testCloud) error {
				_, err := tc.CopyVolumes(CopyVolumesInput{SourceVolumeID: tc.ready(t, "gp3", 600).ID, Type: "gp3"})
				return err
			},
			want: CodeVolumeLimitExceeded,
		},
		{
			name:   "a copy of another type within its quota",
			quotas: Quotas{StorageTiB: map[string]int64{"gp3": 1}},
			act: func(t *testing.T, tc *testCloud) error {
				_, err := tc.CopyVolumes(CopyVolumesInput{SourceVolumeID: tc.ready(t, "gp3", 600).ID, Type: "gp2"})
				return err
			},
		},
		{
			name:   "growing a volume within the quota",
			quotas: Quotas{StorageTiB: map[string]int64{"gp3": 1}},
			act: func(t *testing.T, tc *testCloud) error {
				return tc.modify(ModifyVolumeInput{VolumeID: tc.ready(t, "gp3", 600).ID, Size: 1024 - root})
			},
		},
		{
			name:   "growing a volume over the quota",
			quotas: Quotas{StorageTiB: map[string]int64{"gp3": 1}},
			act: func(t *testing.T, tc *testCloud) error {
				return tc.modify(ModifyVolumeInput{VolumeID: tc.ready(t, "gp3", 600).ID, Size: 1025 - root})
			},
			want: CodeVolumeLimitExceeded,
		},
		{
			name:   "changing the type into a full quota",
			quotas: Quotas{StorageTiB: map[string]int64{"gp3": 1}},
			act: func(t *testing.T, tc *testCloud) error {
				tc.ready(t, "gp3", 1000)
				return tc.modify(ModifyVolumeInput{VolumeID: tc.ready(t, "gp2", 100).ID, Type: "gp3"})
			},
			want: CodeVolumeLimitExceeded,
		},
		{
			name:   "a modification that neither grows nor changes type is not checked",
			quotas: Quotas{StorageTiB: map[string]int64{"gp3": 1}},
			act: func(t *testing.T, tc *testCloud) error {
				v := tc.ready(t, "gp3", 1024-root)
				if err := tc.SetQuotas(Quotas{StorageTiB: map[string]int64{"gp3": 0}}); err != nil {
					t.Fatal(err)
				}
				return tc.modify(ModifyVolumeInput{VolumeID: v.ID, Iops: i32(4000)})
			},
		},
		{
			name:   "a modification in progress counts at its target",
			quotas: Quotas{StorageTiB: map[string]int64{"gp3": 1}},
			setup: func(t *testing.T, tc *testCloud) {
				if err := tc.modify(ModifyVolumeInput{VolumeID: tc.ready(t, "gp3", 100).ID, Size: 1024 - root}); err != nil {
					t.Fatal(err)
				}
			},
			act:  func(t *testing.T, tc *testCloud) error { return tc.create(t, gp3(1)) },
			want: CodeVolumeLimitExceeded,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tc := quotaCloud(t, tt.quotas)
			if tt.setup != nil {
				tt.setup(t, tc)
			}
			err := tt.act(t, tc)
			if code(err) != tt.want {
				t.Fatalf("got %v, want code %q", err, tt.want)
			}
		})
	}
}

// create is CreateVolume in the local zone, keeping only the error.
func (tc *testCloud) create(t *testing.T, in CreateVolumeInput) error {
	t.Helper()
	in.Zone = tc.local(t).Zone
	_, err := tc.CreateVolume(in)
	return err
}

// modify is ModifyVolume, keeping only the error.
func (tc *testCloud) modify(in ModifyVolumeInput) error {
	_, err := tc.ModifyVolume(in)
	return err
}

func TestStorageQuotaMessage(t *testing.T) {
	tc := quotaCloud(t, Quotas{StorageTiB: map[string]int64{"gp3": 2}})
	err := tc.create(t, CreateVolumeInput{Size: 4096, Type: "gp3"})
	want := "VolumeLimitExceeded: You have exceeded your maximum gp3 storage limit of 2 TiB in this region."
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("got %v, want %q…", err, want)
	}
}

func TestSnapshotQuota(t *testing.T) {
	tests := []struct {
		name  string
		quota int64
		// existing snapshots before the request, and how many of them are
		// deleted again.
		existing, deleted int
		want              string
	}{
		{name: "below the quota", quota: 3, existing: 2},
		{name: "at the quota", quota: 3, existing: 3, want: CodeSnapshotLimitExceeded},
		{name: "a deleted snapshot frees its place", quota: 3, existing: 3, deleted: 1},
		{name: "zero is EC2's default", quota: 0, existing: 3},
		{name: "negative is no limit", quota: -1, existing: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tc := quotaCloud(t, Quotas{Snapshots: tt.quota})
			vol := tc.ready(t, "gp3", 1).ID
			var ids []string
			for range tt.existing {
				s, err := tc.CreateSnapshot(CreateSnapshotInput{VolumeID: vol})
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, s.ID)
			}
			for _, id := range ids[:tt.deleted] {
				if err := tc.DeleteSnapshot(id, false); err != nil {
					t.Fatal(err)
				}
			}
			_, err := tc.CreateSnapshot(CreateSnapshotInput{VolumeID: vol})
			if code(err) != tt.want {
				t.Fatalf("got %v, want code %q", err, tt.want)
			}
		})
	}
}

// A refused request leaves nothing behind: no volume, no bytes in the
// store, no snapshot, no modification, no used modification budget and no
// client-token record, so the same request succeeds once the quota allows.
func TestRefusedRequestsHaveNoSideEffect(t *testing.T) {
	tc := newTestCloud(t, Config{Quotas: Quotas{StorageTiB: map[string]int64{"gp3": 1}, Snapshots: 1}, ModificationsPerDay: 1})
	before, _ := tc.store.count()
	in := CreateVolumeInput{Zone: tc.local(t).Zone, Size: 2048, Type: "gp3", ClientToken: "pvc-1"}
	if _, err := tc.CreateVolume(in); code(err) != CodeVolumeLimitExceeded {
		t.Fatalf("CreateVolume over the quota: %v", err)
	}
	if vols := tc.Volumes(); len(vols) != 1 || !vols[0].Root {
		t.Fatalf("refused CreateVolume left volumes %+v", vols)
	}
	if n, _ := tc.store.count(); n != before {
		t.Fatalf("refused CreateVolume left %d volumes in the store, had %d", n, before)
	}

	v := tc.mustVolume(t, 1000)
	if _, err := tc.ModifyVolume(ModifyVolumeInput{VolumeID: v.ID, Size: 1100}); code(err) != CodeVolumeLimitExceeded {
		t.Fatalf("ModifyVolume over the quota: %v", err)
	}
	if _, err := tc.DescribeVolumesModifications(Query{IDs: []string{v.ID}}); code(err) != CodeInvalidVolumeModNotFound {
		t.Fatalf("refused ModifyVolume left a modification: %v", err)
	}
	if _, err := tc.CopyVolumes(CopyVolumesInput{SourceVolumeID: v.ID, Type: "gp3", ClientToken: "copy-1"}); code(err) != CodeVolumeLimitExceeded {
		t.Fatalf("CopyVolumes over the quota: %v", err)
	}
	if _, err := tc.CreateSnapshot(CreateSnapshotInput{VolumeID: v.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.CreateSnapshot(CreateSnapshotInput{VolumeID: v.ID}); code(err) != CodeSnapshotLimitExceeded {
		t.Fatalf("CreateSnapshot over the quota: %v", err)
	}
	if _, m := tc.store.count(); len(tc.Snapshots()) != 1 || m != 1 {
		t.Fatalf("after a refused CreateSnapshot: %d snapshots, %d in the store, want 1", len(tc.Snapshots()), m)
	}

	if err := tc.SetQuotas(Quotas{StorageTiB: map[string]int64{"gp3": 5}}); err != nil {
		t.Fatal(err)
	}
	created, err := tc.CreateVolume(in)
	if err != nil {
		t.Fatalf("CreateVolume after raising the quota: %v", err)
	}
	if got := tc.describe(t, created.ID); got.Size != 2048 {
		t.Fatalf("volume after raising the quota: %+v", got)
	}
	again, err := tc.CreateVolume(in)
	if err != nil || again.ID != created.ID {
		t.Fatalf("retry of the created volume: %v, %v; want %s", again.ID, err, created.ID)
	}
	if _, err := tc.CopyVolumes(CopyVolumesInput{SourceVolumeID: v.ID, Type: "gp3", ClientToken: "copy-1"}); err != nil {
		t.Fatalf("CopyVolumes after raising the quota: %v", err)
	}
	if _, err := tc.ModifyVolume(ModifyVolumeInput{VolumeID: v.ID, Size: 1100}); err != nil {
		t.Fatalf("ModifyVolume after raising the quota (the refused one must not use the budget): %v", err)
	}
}

func TestQuotaSetting(t *testing.T) {
	defaults := DefaultQuotas()
	with := func(typ string, tib int64, snaps int64) Quotas {
		q := DefaultQuotas()
		q.StorageTiB[typ] = tib
		q.Snapshots = snaps
		return q
	}
	tests := []struct {
		name    string
		start   Quotas
		patch   string
		want    Quotas
		wantErr bool
	}{
		{name: "EC2's defaults", want: defaults},
		{name: "a type at start", start: Quotas{StorageTiB: map[string]int64{"gp3": 1}}, want: with("gp3", 1, DefaultSnapshotQuota)},
		{name: "patch one type", start: Quotas{StorageTiB: map[string]int64{"gp3": 1}, Snapshots: 7}, patch: `{"storageTiB":{"io2":3}}`,
			want: func() Quotas { q := with("gp3", 1, 7); q.StorageTiB["io2"] = 3; return q }()},
		{name: "patch the snapshot count", patch: `{"snapshots":5}`, want: with("gp2", DefaultStorageQuotaTiB, 5)},
		{name: "patch an unknown type", patch: `{"storageTiB":{"gp9":1}}`, want: defaults, wantErr: true},
		{name: "patch that is not JSON", patch: `{`, want: defaults, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tc := newTestCloud(t, Config{Quotas: tt.start})
			if tt.patch != "" {
				if err := tc.PatchQuotas([]byte(tt.patch)); (err != nil) != tt.wantErr {
					t.Fatalf("PatchQuotas(%s) = %v", tt.patch, err)
				}
			}
			got := tc.Quotas()
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Quotas() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestQuotaConfigRejectsUnknownType(t *testing.T) {
	_, err := New(Config{Store: newFakeStore(), Quotas: Quotas{StorageTiB: map[string]int64{"gp9": 1}}})
	if err == nil || !strings.Contains(err.Error(), "gp9") {
		t.Fatalf("New with a quota of an unknown type: %v", err)
	}
}

func TestDefaultQuotas(t *testing.T) {
	q := DefaultQuotas()
	want := map[string]int64{"gp2": 50, "gp3": 50, "io1": 50, "io2": 20, "st1": 50, "sc1": 50, "standard": 50}
	if !maps.Equal(q.StorageTiB, want) || q.Snapshots != 100000 {
		t.Fatalf("DefaultQuotas() = %+v", q)
	}
}

// count is how many volumes and snapshots the store holds.
func (s *fakeStore) count() (volumes, snapshots int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.volumes), len(s.snapshots)
}

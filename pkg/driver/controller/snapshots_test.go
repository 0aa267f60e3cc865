package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/diskplane/diskplane/pkg/cloud"
	"github.com/diskplane/diskplane/pkg/driver/parameters"
	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

func (h *harness) snapshot(t *testing.T, name, volumeID string, params map[string]string) *csi.Snapshot {
	t.Helper()
	resp, err := h.svc.CreateSnapshot(h.ctx(), &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: volumeID, Parameters: params})
	if err != nil {
		t.Fatalf("CreateSnapshot(%s): %v", name, err)
	}
	return resp.GetSnapshot()
}

func (h *harness) emulatedSnapshot(t *testing.T, id string) model.Snapshot {
	t.Helper()
	for _, s := range h.env.Cloud().Snapshots() {
		if s.ID == id {
			return s
		}
	}
	t.Fatalf("the emulator has no snapshot %s", id)
	return model.Snapshot{}
}

func TestCreateSnapshot(t *testing.T) {
	h := newHarness(t, emulatortest.Options{Latencies: model.Latencies{Snapshot: 300 * time.Millisecond}},
		Options{ExtraTags: map[string]string{"team": "storage"}})
	vol := h.createVolume(t, createReq("pvc-src", 5, ""))
	other := h.createVolume(t, createReq("pvc-other", 5, ""))

	snap := h.snapshot(t, "snapcontent-1", vol.VolumeId, map[string]string{
		"tagSpecification_1":                    "origin={{ .VolumeSnapshotNamespace }}/{{ .VolumeSnapshotName }}",
		parameters.KeyVolumeSnapshotName:        "nightly",
		parameters.KeyVolumeSnapshotNamespace:   "shop",
		parameters.KeyVolumeSnapshotContentName: "snapcontent-1",
	})
	if snap.GetSourceVolumeId() != vol.VolumeId || snap.GetSizeBytes() != 5*GiB || snap.GetCreationTime() == nil {
		t.Fatalf("snapshot %v", snap)
	}
	if snap.GetReadyToUse() {
		t.Fatal("a snapshot still being copied must not be ready to use")
	}
	tags := h.emulatedSnapshot(t, snap.SnapshotId).Tags
	for k, v := range map[string]string{cloud.TagSnapshotName: "snapcontent-1", "origin": "shop/nightly", "team": "storage", testDriverName + "/cluster": "true"} {
		if tags[k] != v {
			t.Fatalf("snapshot tags %v: want %s=%s", tags, k, v)
		}
	}

	// The snapshotter repeats the request until it is ready; it is the same snapshot.
	eventually(t, "the snapshot to be ready", func() bool {
		again := h.snapshot(t, "snapcontent-1", vol.VolumeId, nil)
		if again.GetSnapshotId() != snap.GetSnapshotId() {
			t.Fatalf("retry made snapshot %s, first %s", again.GetSnapshotId(), snap.GetSnapshotId())
		}
		return again.GetReadyToUse()
	})
	if n := h.env.Calls("CreateSnapshot"); n != 1 {
		t.Fatalf("%d EC2 CreateSnapshot calls, want 1", n)
	}

	tests := []struct {
		name string
		req  *csi.CreateSnapshotRequest
		code codes.Code
	}{
		{name: "same name, other volume", req: &csi.CreateSnapshotRequest{Name: "snapcontent-1", SourceVolumeId: other.VolumeId}, code: codes.AlreadyExists},
		{name: "source does not exist", req: &csi.CreateSnapshotRequest{Name: "snapcontent-2", SourceVolumeId: "vol-0123456789abcdef0"}, code: codes.NotFound},
		{name: "no name", req: &csi.CreateSnapshotRequest{SourceVolumeId: vol.VolumeId}, code: codes.InvalidArgument},
		{name: "no source", req: &csi.CreateSnapshotRequest{Name: "snapcontent-3"}, code: codes.InvalidArgument},
		{name: "unknown parameter", req: &csi.CreateSnapshotRequest{Name: "snapcontent-4", SourceVolumeId: vol.VolumeId, Parameters: map[string]string{"lockMode": "governance"}}, code: codes.InvalidArgument},
		{name: "reserved tag", req: &csi.CreateSnapshotRequest{Name: "snapcontent-5", SourceVolumeId: vol.VolumeId, Parameters: map[string]string{"tagSpecification_1": "CSIVolumeName=x"}}, code: codes.InvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.svc.CreateSnapshot(h.ctx(), tc.req)
			wantCode(t, err, tc.code, "")
		})
	}
	if n := len(h.env.Cloud().Snapshots()); n != 1 {
		t.Fatalf("%d snapshots, want 1", n)
	}
}

func TestDeleteAndGetSnapshot(t *testing.T) {
	h := newHarness(t, emulatortest.Options{}, Options{})
	vol := h.createVolume(t, createReq("pvc-src", 1, ""))
	snap := h.snapshot(t, "snap-del", vol.VolumeId, nil)

	got, err := h.svc.GetSnapshot(h.ctx(), &csi.GetSnapshotRequest{SnapshotId: snap.SnapshotId})
	if err != nil || got.GetSnapshot().GetSnapshotId() != snap.SnapshotId || got.GetSnapshot().GetSourceVolumeId() != vol.VolumeId {
		t.Fatalf("GetSnapshot = %v, %v", got, err)
	}
	for i := range 2 {
		if _, err := h.svc.DeleteSnapshot(h.ctx(), &csi.DeleteSnapshotRequest{SnapshotId: snap.SnapshotId}); err != nil {
			t.Fatalf("delete #%d: %v", i+1, err)
		}
	}
	for _, id := range []string{"snap-0123456789abcdef0", "fake-snapshot-id"} {
		if _, err := h.svc.DeleteSnapshot(h.ctx(), &csi.DeleteSnapshotRequest{SnapshotId: id}); err != nil {
			t.Fatalf("delete of unknown snapshot %s: %v", id, err)
		}
	}
	_, err = h.svc.GetSnapshot(h.ctx(), &csi.GetSnapshotRequest{SnapshotId: snap.SnapshotId})
	wantCode(t, err, codes.NotFound, "")
	_, err = h.svc.GetSnapshot(h.ctx(), &csi.GetSnapshotRequest{})
	wantCode(t, err, codes.InvalidArgument, "")
	_, err = h.svc.DeleteSnapshot(h.ctx(), &csi.DeleteSnapshotRequest{})
	wantCode(t, err, codes.InvalidArgument, "")
	if n := len(h.env.Cloud().Snapshots()); n != 0 {
		t.Fatalf("%d snapshots left", n)
	}
}

func (h *harness) listSnapshots(t *testing.T, req *csi.ListSnapshotsRequest) []string {
	t.Helper()
	var ids []string
	for page := 0; ; page++ {
		if page > 100 {
			t.Fatal("ListSnapshots never ends")
		}
		resp, err := h.svc.ListSnapshots(h.ctx(), req)
		if err != nil {
			t.Fatalf("ListSnapshots: %v", err)
		}
		if req.MaxEntries > 0 && len(resp.GetEntries()) > int(req.MaxEntries) {
			t.Fatalf("page of %d, max %d", len(resp.GetEntries()), req.MaxEntries)
		}
		for _, e := range resp.GetEntries() {
			ids = append(ids, e.GetSnapshot().GetSnapshotId())
		}
		if resp.GetNextToken() == "" {
			slices.Sort(ids)
			return ids
		}
		req.StartingToken = resp.GetNextToken()
	}
}

func TestListSnapshots(t *testing.T) {
	h := newHarness(t, emulatortest.Options{}, Options{})
	a := h.createVolume(t, createReq("pvc-a", 1, ""))
	b := h.createVolume(t, createReq("pvc-b", 1, ""))
	var ofA, all []string
	for i := range 6 {
		src := a
		if i%3 == 2 {
			src = b
		}
		id := h.snapshot(t, fmt.Sprintf("snap-%d", i), src.VolumeId, nil).SnapshotId
		all = append(all, id)
		if src == a {
			ofA = append(ofA, id)
		}
	}
	slices.Sort(ofA)
	slices.Sort(all)

	for _, maxEntries := range []int32{0, 1, 4, 100} {
		t.Run(fmt.Sprintf("all, max %d", maxEntries), func(t *testing.T) {
			if got := h.listSnapshots(t, &csi.ListSnapshotsRequest{MaxEntries: maxEntries}); !slices.Equal(got, all) {
				t.Fatalf("listed %v, want %v", got, all)
			}
		})
		t.Run(fmt.Sprintf("of one volume, max %d", maxEntries), func(t *testing.T) {
			if got := h.listSnapshots(t, &csi.ListSnapshotsRequest{MaxEntries: maxEntries, SourceVolumeId: a.VolumeId}); !slices.Equal(got, ofA) {
				t.Fatalf("listed %v, want %v", got, ofA)
			}
		})
	}
	for _, tc := range []struct {
		name string
		req  *csi.ListSnapshotsRequest
		want []string
	}{
		{name: "by ID", req: &csi.ListSnapshotsRequest{SnapshotId: all[2]}, want: all[2:3]},
		{name: "by ID and its volume", req: &csi.ListSnapshotsRequest{SnapshotId: ofA[0], SourceVolumeId: a.VolumeId}, want: ofA[:1]},
		{name: "by ID and another volume", req: &csi.ListSnapshotsRequest{SnapshotId: ofA[0], SourceVolumeId: b.VolumeId}},
		{name: "unknown ID", req: &csi.ListSnapshotsRequest{SnapshotId: "snap-0123456789abcdef0"}},
		{name: "malformed ID", req: &csi.ListSnapshotsRequest{SnapshotId: "fake-snapshot-id"}},
		{name: "unknown volume", req: &csi.ListSnapshotsRequest{SourceVolumeId: "vol-0123456789abcdef0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := h.listSnapshots(t, tc.req); !slices.Equal(got, tc.want) {
				t.Fatalf("listed %v, want %v", got, tc.want)
			}
		})
	}
	_, err := h.svc.ListSnapshots(h.ctx(), &csi.ListSnapshotsRequest{StartingToken: "invalid-token"})
	wantCode(t, err, codes.Aborted, "")
	_, err = h.svc.ListSnapshots(h.ctx(), &csi.ListSnapshotsRequest{MaxEntries: -1})
	wantCode(t, err, codes.InvalidArgument, "")
}

func TestCreateVolumeFromSnapshot(t *testing.T) {
	h := newHarness(t, emulatortest.Options{Latencies: model.Latencies{Snapshot: 200 * time.Millisecond}}, Options{})
	src := h.createVolume(t, createReq("pvc-src", 8, ""))
	snap := h.snapshot(t, "snap-restore", src.VolumeId, nil)
	source := &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snap.SnapshotId}}}

	// The snapshot is still pending: the restore waits for it.
	req := createReq("pvc-restored", 4, "us-east-1c")
	req.VolumeContentSource = source
	vol := h.createVolume(t, req)
	if vol.GetCapacityBytes() != 8*GiB {
		t.Fatalf("restored %d bytes, want the snapshot's 8 GiB", vol.GetCapacityBytes())
	}
	if vol.GetContentSource().GetSnapshot().GetSnapshotId() != snap.SnapshotId {
		t.Fatalf("content source %v", vol.GetContentSource())
	}
	if v := h.volume(t, vol.VolumeId); v.SnapshotID != snap.SnapshotId || v.Zone != "us-east-1c" {
		t.Fatalf("emulated volume %+v", v)
	}
	larger := createReq("pvc-larger", 12, "")
	larger.VolumeContentSource = source
	if got := h.createVolume(t, larger).GetCapacityBytes(); got != 12*GiB {
		t.Fatalf("larger restore is %d bytes, want 12 GiB", got)
	}

	tooSmall := createReq("pvc-small", 4, "")
	tooSmall.CapacityRange.LimitBytes = 4 * GiB
	tooSmall.VolumeContentSource = source
	_, err := h.svc.CreateVolume(h.ctx(), tooSmall)
	wantCode(t, err, codes.OutOfRange, "")

	missing := createReq("pvc-missing", 8, "")
	missing.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: "snap-0123456789abcdef0"}}}
	_, err = h.svc.CreateVolume(h.ctx(), missing)
	wantCode(t, err, codes.NotFound, "snap-0123456789abcdef0")
}

func TestCreateVolumeClone(t *testing.T) {
	h := newHarness(t, emulatortest.Options{}, Options{})
	src := h.createVolume(t, createReq("pvc-src", 6, "us-east-1b"))
	source := &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: src.VolumeId}}}

	req := createReq("pvc-clone", 10, "")
	req.VolumeContentSource = source
	clone := h.createVolume(t, req)
	v := h.volume(t, clone.VolumeId)
	if v.SourceVolumeID != src.VolumeId || v.Zone != "us-east-1b" || v.Size != 10 {
		t.Fatalf("clone %+v: want a 10 GiB copy of %s in us-east-1b", v, src.VolumeId)
	}
	if clone.GetContentSource().GetVolume().GetVolumeId() != src.VolumeId {
		t.Fatalf("content source %v", clone.GetContentSource())
	}
	again := h.createVolume(t, req)
	if again.VolumeId != clone.VolumeId {
		t.Fatalf("retried clone is %s, first %s", again.VolumeId, clone.VolumeId)
	}

	elsewhere := createReq("pvc-clone-c", 10, "us-east-1c")
	elsewhere.VolumeContentSource = source
	_, err := h.svc.CreateVolume(h.ctx(), elsewhere)
	wantCode(t, err, codes.ResourceExhausted, "us-east-1b")

	missing := createReq("pvc-clone-missing", 10, "")
	missing.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: "vol-0123456789abcdef0"}}}
	_, err = h.svc.CreateVolume(h.ctx(), missing)
	wantCode(t, err, codes.NotFound, "")

	// An EC2-API cloud without CopyVolumes (moto is one): refused at once,
	// naming the action, and nothing made.
	if err := h.env.Faults().Patch([]byte(`{"unsupported":["CopyVolumes"]}`)); err != nil {
		t.Fatal(err)
	}
	unsupported := createReq("pvc-clone-unsupported", 10, "")
	unsupported.VolumeContentSource = source
	_, err = h.svc.CreateVolume(h.ctx(), unsupported)
	wantCode(t, err, codes.InvalidArgument, "CopyVolumes")
	for _, v := range h.env.Cloud().Volumes() {
		if v.Tags[cloud.TagVolumeName] == "pvc-clone-unsupported" {
			t.Errorf("a refused clone left volume %s", v.ID)
		}
	}
}

// recordingIntents hands out intents that report no process before, or
// fail with err, remembering the contents asked for.
type recordingIntents struct {
	mu       sync.Mutex
	contents []string
	err      error
}

func (r *recordingIntents) For(content string) cloud.SnapshotIntent {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.contents = append(r.contents, content)
	return r
}

func (r *recordingIntents) Record(context.Context) (bool, error) { return false, r.err }

// TestCreateSnapshotRecordsIntent: right after a start, with EC2's
// visibility window far longer than the calls' deadlines. A request that
// names its VolumeSnapshotContent (the snapshotter's
// --extra-create-metadata) has this process recorded on it before
// CreateSnapshot is sent, and the record's "no process before" lets the
// snapshot be made at once; one that names no content is not recorded and
// waits out the window (past the deadline here); a record that fails is
// Unavailable and sends nothing.
func TestCreateSnapshotRecordsIntent(t *testing.T) {
	intents := &recordingIntents{}
	h := newHarness(t, emulatortest.Options{}, Options{SnapshotIntents: intents})
	vol := h.createVolume(t, createReq("pvc-src", 5, ""))
	h.visibility = time.Hour
	h.restart()
	create := func(name string, params map[string]string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := h.svc.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: vol.VolumeId, Parameters: params})
		return err
	}
	named := func(name string) int {
		n := 0
		for _, s := range h.env.Cloud().Snapshots() {
			if s.Tags[cloud.TagSnapshotName] == name {
				n++
			}
		}
		return n
	}
	withContent := map[string]string{parameters.KeyVolumeSnapshotContentName: "snapcontent-1"}

	if err := create("snapshot-1", withContent); err != nil {
		t.Fatalf("the first snapshot after the start, its intent recorded with no process before: %v", err)
	}
	wantCode(t, create("snapshot-2", nil), codes.DeadlineExceeded, "may not show")
	if !slices.Equal(intents.contents, []string{"snapcontent-1"}) {
		t.Fatalf("intents recorded for contents %v, want only snapcontent-1", intents.contents)
	}
	if named("snapshot-1") != 1 || named("snapshot-2") != 0 {
		t.Fatalf("snapshots made: %d named snapshot-1, %d snapshot-2; want 1 and 0", named("snapshot-1"), named("snapshot-2"))
	}

	intents.err = errors.New("volumesnapshotcontents is forbidden")
	wantCode(t, create("snapshot-3", withContent), codes.Unavailable, "forbidden")
	if named("snapshot-3") != 0 {
		t.Fatal("a snapshot was made although its intent could not be recorded")
	}
}

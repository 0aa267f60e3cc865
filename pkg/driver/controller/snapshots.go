package controller

import (
	"context"
	"errors"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/cloud"
	"github.com/diskplane/diskplane/pkg/driver/parameters"
	"github.com/diskplane/diskplane/pkg/inflight"
)

// CreateSnapshot snapshots a volume for the request's name and returns at
// once: EC2 cuts the snapshot when asked and copies it in the background, so
// the answer says ReadyToUse=false until that is done and the snapshotter
// asks again. A retry with the same name returns the same snapshot; the same
// name for another volume is AlreadyExists.
func (s *Service) CreateSnapshot(ctx context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	name, source := req.GetName(), req.GetSourceVolumeId()
	if err := checkName("snapshot", name); err != nil {
		return nil, err
	}
	if err := requireID("source volume ID", source); err != nil {
		return nil, err
	}
	params, err := s.params.Snapshot(req.GetParameters())
	if err != nil {
		return nil, invalidArgument("%v", err)
	}
	key := inflight.SnapshotName(name)
	release, ok := s.inFlight.TryAcquire(key)
	if !ok {
		return nil, busy(key)
	}
	defer release()

	sourceTags, err := s.snapshotSourceTags(ctx, source)
	if err != nil {
		return nil, err
	}
	opts := &cloud.CreateSnapshotOptions{Tags: mergeMaps(params.Tags, sourceTags)}
	if content := params.Metadata.VolumeSnapshotContentName; content != "" && s.intents != nil {
		opts.Intent = s.intents.For(content)
	}
	snap, err := s.cloud.CreateSnapshot(ctx, name, source, opts)
	if err != nil {
		return nil, failed(err, "create snapshot %q of volume %s", name, source)
	}
	klog.V(2).InfoS("Created snapshot", "name", name, "snapshotID", snap.ID, "sourceVolumeID", source, "ready", snap.Ready)
	return &csi.CreateSnapshotResponse{Snapshot: csiSnapshot(snap)}, nil
}

// DeleteSnapshot deletes a snapshot; one that does not exist is success.
func (s *Service) DeleteSnapshot(ctx context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	id := req.GetSnapshotId()
	if err := requireID("snapshot ID", id); err != nil {
		return nil, err
	}
	key := inflight.Snapshot(id)
	release, ok := s.inFlight.TryAcquire(key)
	if !ok {
		return nil, busy(key)
	}
	defer release()
	err := s.cloud.DeleteSnapshot(ctx, id)
	switch {
	case errors.Is(err, cloud.ErrNotFound):
		klog.V(4).InfoS("Snapshot to delete does not exist", "snapshotID", id)
	case err != nil:
		return nil, failed(err, "delete snapshot %s", id)
	default:
		klog.V(2).InfoS("Deleted snapshot", "snapshotID", id)
	}
	return &csi.DeleteSnapshotResponse{}, nil
}

// GetSnapshot describes one snapshot.
func (s *Service) GetSnapshot(ctx context.Context, req *csi.GetSnapshotRequest) (*csi.GetSnapshotResponse, error) {
	id := req.GetSnapshotId()
	if err := requireID("snapshot ID", id); err != nil {
		return nil, err
	}
	snap, err := s.cloud.GetSnapshot(ctx, id)
	if err != nil {
		return nil, failed(err, "snapshot %s", id)
	}
	return &csi.GetSnapshotResponse{Snapshot: csiSnapshot(snap)}, nil
}

// ListSnapshots lists one snapshot by ID (none when it does not exist), the
// snapshots of one volume, or every snapshot this driver created, page by page.
func (s *Service) ListSnapshots(ctx context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	if id := req.GetSnapshotId(); id != "" {
		if req.GetMaxEntries() < 0 {
			return nil, invalidArgument("max_entries %d must not be negative", req.GetMaxEntries())
		}
		snap, err := s.cloud.GetSnapshot(ctx, id)
		if errors.Is(err, cloud.ErrNotFound) {
			return &csi.ListSnapshotsResponse{}, nil
		}
		if err != nil {
			return nil, failed(err, "snapshot %s", id)
		}
		if src := req.GetSourceVolumeId(); src != "" && src != snap.SourceVolumeID {
			return &csi.ListSnapshotsResponse{}, nil
		}
		return &csi.ListSnapshotsResponse{Entries: []*csi.ListSnapshotsResponse_Entry{{Snapshot: csiSnapshot(snap)}}}, nil
	}
	opts := cloud.SnapshotListOptions{SourceVolumeID: req.GetSourceVolumeId()}
	if opts.SourceVolumeID == "" {
		opts.TagKey = parameters.ClusterTagKey(s.driverName)
	}
	fetch := func(ctx context.Context, token string, size int32) ([]*cloud.Snapshot, string, error) {
		o := opts
		o.NextToken, o.MaxResults = token, size
		page, err := s.cloud.ListSnapshots(ctx, o)
		if errors.Is(err, cloud.ErrNotFound) && opts.SourceVolumeID != "" {
			return nil, "", nil
		}
		if err != nil {
			return nil, "", err
		}
		return page.Snapshots, page.NextToken, nil
	}
	snaps, next, err := paginate(ctx, "snapshots", req.GetStartingToken(), req.GetMaxEntries(), fetch)
	if err != nil {
		return nil, err
	}
	resp := &csi.ListSnapshotsResponse{NextToken: next, Entries: make([]*csi.ListSnapshotsResponse_Entry, 0, len(snaps))}
	for _, snap := range snaps {
		resp.Entries = append(resp.Entries, &csi.ListSnapshotsResponse_Entry{Snapshot: csiSnapshot(snap)})
	}
	return resp, nil
}

// csiSnapshot describes a snapshot in CSI terms.
func csiSnapshot(snap *cloud.Snapshot) *csi.Snapshot {
	out := &csi.Snapshot{
		SnapshotId:     snap.ID,
		SourceVolumeId: snap.SourceVolumeID,
		SizeBytes:      int64(snap.SizeGiB) * GiB,
		ReadyToUse:     snap.Ready,
	}
	if !snap.CreatedAt.IsZero() {
		out.CreationTime = timestamppb.New(snap.CreatedAt)
	}
	return out
}

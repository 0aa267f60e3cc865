package controller

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/diskplane/diskplane/pkg/cloud"
	"github.com/diskplane/diskplane/pkg/driver/parameters"
)

// ListVolumes lists the volumes this driver created (those carrying its
// cluster tag), page by page, with the nodes each is attached to. Volumes
// being deleted are left out: for Kubernetes they are already gone.
func (s *Service) ListVolumes(ctx context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	tagKey := parameters.ClusterTagKey(s.driverName)
	fetch := func(ctx context.Context, token string, size int32) ([]*cloud.Volume, string, error) {
		page, err := s.cloud.ListVolumes(ctx, cloud.ListOptions{MaxResults: size, NextToken: token, TagKey: tagKey})
		if err != nil {
			return nil, "", err
		}
		vols := make([]*cloud.Volume, 0, len(page.Volumes))
		for _, v := range page.Volumes {
			if v.State != stateDeleting && v.State != stateDeleted {
				vols = append(vols, v)
			}
		}
		return vols, page.NextToken, nil
	}
	vols, next, err := paginate(ctx, "volumes", req.GetStartingToken(), req.GetMaxEntries(), fetch)
	if err != nil {
		return nil, err
	}
	resp := &csi.ListVolumesResponse{NextToken: next, Entries: make([]*csi.ListVolumesResponse_Entry, 0, len(vols))}
	for _, v := range vols {
		resp.Entries = append(resp.Entries, &csi.ListVolumesResponse_Entry{
			Volume: csiVolume(v),
			Status: &csi.ListVolumesResponse_VolumeStatus{PublishedNodeIds: publishedNodes(v)},
		})
	}
	return resp, nil
}

// ControllerGetVolume describes one volume and the nodes it is attached to.
func (s *Service) ControllerGetVolume(ctx context.Context, req *csi.ControllerGetVolumeRequest) (*csi.ControllerGetVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := requireID("volume ID", id); err != nil {
		return nil, err
	}
	v, err := s.cloud.GetVolume(ctx, id)
	if err != nil {
		return nil, failed(err, "volume %s", id)
	}
	return &csi.ControllerGetVolumeResponse{
		Volume: csiVolume(v),
		Status: &csi.ControllerGetVolumeResponse_VolumeStatus{PublishedNodeIds: publishedNodes(v)},
	}, nil
}

// csiVolume describes an existing volume in CSI terms.
func csiVolume(v *cloud.Volume) *csi.Volume {
	out := &csi.Volume{VolumeId: v.ID, CapacityBytes: int64(v.SizeGiB) * GiB, AccessibleTopology: volumeTopology(v)}
	switch {
	case v.SnapshotID != "":
		out.ContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: v.SnapshotID}}}
	case v.SourceVolumeID != "":
		out.ContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
			Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: v.SourceVolumeID}}}
	}
	return out
}

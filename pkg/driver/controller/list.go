package controller

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/diskplane/diskplane/pkg/cloud"
)

// ListVolumes lists the account's volumes, page by page, with the nodes
// each is attached to: every volume a PersistentVolume may name, not only
// those this driver created (static and migrated volumes carry no cluster
// tag). The external-attacher compares the list with its
// VolumeAttachments and attaches again every attached volume it does not
// find, at every resync. Volumes being deleted are left out (for
// Kubernetes they are already gone), and so are the volumes an instance was
// launched with (its root volume), which no PersistentVolume names.
func (s *Service) ListVolumes(ctx context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	fetch := func(ctx context.Context, token string, size int32) ([]*cloud.Volume, string, error) {
		page, err := s.cloud.ListVolumes(ctx, cloud.ListOptions{MaxResults: size, NextToken: token})
		if err != nil {
			return nil, "", err
		}
		vols := make([]*cloud.Volume, 0, len(page.Volumes))
		for _, v := range page.Volumes {
			if v.State != stateDeleting && v.State != stateDeleted && !launchedWithInstance(v) {
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

// launchedWithInstance reports whether a volume came with the instance it
// is attached to: EC2 deletes such a volume with its instance, which it
// never does for one attached later.
func launchedWithInstance(v *cloud.Volume) bool {
	for _, a := range v.Attachments {
		if a.DeleteOnTermination {
			return true
		}
	}
	return false
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

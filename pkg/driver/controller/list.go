package controller

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/diskplane/diskplane/pkg/cloud"
	"github.com/diskplane/diskplane/pkg/driver/volumehealth"
)

// ListVolumes lists the account's volumes, page by page, with the nodes
// each is attached to: every volume a PersistentVolume may name, not only
// those this driver created (static and migrated volumes carry no cluster
// tag). The external-attacher compares the list with its
// VolumeAttachments and attaches again every attached volume it does not
// find, at every resync. Volumes being deleted are left out (for
// Kubernetes they are already gone), and so are the volumes an instance was
// launched with (its root volume), which no PersistentVolume names. Each
// entry carries its condition from EC2's view (one DescribeVolumeStatus
// call per page).
func (s *Service) ListVolumes(ctx context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	vols, next, err := paginate(ctx, "volumes", req.GetStartingToken(), req.GetMaxEntries(), s.fetchVolumes)
	if err != nil {
		return nil, err
	}
	reports, _ := s.volumeReports(ctx, vols) // a status that cannot be read is a note in each condition
	resp := &csi.ListVolumesResponse{NextToken: next, Entries: make([]*csi.ListVolumesResponse_Entry, 0, len(vols))}
	for _, v := range vols {
		st := &csi.ListVolumesResponse_VolumeStatus{PublishedNodeIds: publishedNodes(v)}
		volumehealth.SetCondition(st, reports[v.ID])
		resp.Entries = append(resp.Entries, &csi.ListVolumesResponse_Entry{Volume: csiVolume(v), Status: st})
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

// ControllerGetVolume describes one volume, the nodes it is attached to and
// its condition from EC2's view.
func (s *Service) ControllerGetVolume(ctx context.Context, req *csi.ControllerGetVolumeRequest) (*csi.ControllerGetVolumeResponse, error) {
	v, err := s.volumeByID(ctx, req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	reports, _ := s.volumeReports(ctx, []*cloud.Volume{v})
	st := &csi.ControllerGetVolumeResponse_VolumeStatus{PublishedNodeIds: publishedNodes(v)}
	volumehealth.SetCondition(st, reports[v.ID])
	return &csi.ControllerGetVolumeResponse{Volume: csiVolume(v), Status: st}, nil
}

// volumeByID looks up the volume a request names; a missing ID is
// InvalidArgument, a volume EC2 does not know NotFound.
func (s *Service) volumeByID(ctx context.Context, id string) (*cloud.Volume, error) {
	if err := requireID("volume ID", id); err != nil {
		return nil, err
	}
	v, err := s.cloud.GetVolume(ctx, id)
	if err != nil {
		return nil, failed(err, "volume %s", id)
	}
	return v, nil
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

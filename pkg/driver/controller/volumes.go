package controller

import (
	"context"
	"errors"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/cloud"
	"github.com/diskplane/diskplane/pkg/inflight"
)

// Volume states of volumes on their way out, which ListVolumes leaves out:
// for Kubernetes they are already gone.
const (
	stateDeleting = "deleting"
	stateDeleted  = "deleted"
)

// CreateVolume provisions a volume for the request's name, or returns the
// one an earlier attempt made. Everything about the request is checked
// before the cloud is asked for anything, so bad input has no side effect.
func (s *Service) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	name := req.GetName()
	if err := checkName("volume", name); err != nil {
		return nil, err
	}
	caps, err := checkCapabilities(req.GetVolumeCapabilities())
	if err != nil {
		return nil, err
	}
	params, err := s.params.Volume(req.GetParameters(), req.GetMutableParameters(), caps.fsType)
	if err != nil {
		return nil, invalidArgument("%v", err)
	}
	if caps.multiNode && params.Type != cloud.VolumeTypeIO2 {
		return nil, invalidArgument("multi-node access needs volume type io2 (EBS multi-attach), not %s", params.Type)
	}
	if _, err := volumeSize(req.GetCapacityRange(), params.Type, 0); err != nil {
		return nil, err
	}
	release, ok := s.inFlight.TryAcquire(inflight.VolumeName(name))
	if !ok {
		return nil, busy(inflight.VolumeName(name))
	}
	defer release()

	opts := &cloud.CreateVolumeOptions{
		Type:                    params.Type,
		IOPS:                    params.IOPS,
		IOPSPerGiB:              params.IOPSPerGB,
		AllowIOPSPerGiBIncrease: params.AllowAutoIOPSPerGBIncrease,
		Throughput:              params.Throughput,
		Encrypted:               params.Encrypted,
		KMSKeyID:                params.KMSKeyID,
		MultiAttach:             caps.multiNode,
		Tags:                    params.Tags,
	}
	where := place(name, req.GetAccessibilityRequirements())
	src, err := s.resolveSource(ctx, req.GetVolumeContentSource(), &where, opts)
	if err != nil {
		return nil, err
	}
	layout := layoutOf(params, caps)
	if err := checkSourceLayout(src, layout); err != nil {
		return nil, err
	}
	if layout != "" {
		opts.Tags = mergeMaps(opts.Tags, map[string]string{s.tagKey(tagLayout): layout})
	}
	sourceKey, err := s.checkVolumeKey(ctx, params.NodeEncryptionKey, caps, req.GetVolumeContentSource(), params.Metadata.PVCNamespace)
	if err != nil {
		return nil, err
	}
	if opts.SizeGiB, err = volumeSize(req.GetCapacityRange(), params.Type, src.sizeGiB); err != nil {
		return nil, err
	}
	opts.Zone, opts.ZoneID = where.zone, where.zoneID
	// A volume an earlier attempt made serves this one when it fits the
	// request as CSI defines it; the cloud layer returns it (or waits for
	// it) and makes none while one of the name does not fit.
	opts.Mismatch = func(v *cloud.Volume) string { return incompatibility(v, req.GetCapacityRange(), where, opts) }
	vol, err := s.cloud.CreateVolume(ctx, name, opts)
	if err != nil {
		return nil, failed(err, "create volume %q", name)
	}
	klog.V(2).InfoS("Volume ready", "name", name, "volumeID", vol.ID, "zone", vol.Zone,
		"sizeGiB", vol.SizeGiB, "type", vol.Type)
	keyContext, err := s.volumeKeyContext(ctx, vol, params.NodeEncryptionKey, sourceKey, params.Metadata.PVCNamespace)
	if err != nil {
		return nil, err
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:           vol.ID,
		CapacityBytes:      int64(vol.SizeGiB) * GiB,
		VolumeContext:      mergeMaps(params.Context, keyContext),
		ContentSource:      req.GetVolumeContentSource(),
		AccessibleTopology: volumeTopology(vol),
	}}, nil
}

// contentSource is a restore's or clone's source, as resolveSource found
// it; the zero value is none.
type contentSource struct {
	// what names it, for messages: "snapshot snap-…", "volume vol-…".
	what string
	// sizeGiB is its size, the new volume's minimum.
	sizeGiB int64
	// layout is what it was made for (tagLayout), "" when unknown.
	layout string
}

// resolveSource checks a snapshot or volume to restore or clone from, sets
// it in opts, and returns what it is. A clone is made in its source's
// zone, which must satisfy the request's topology.
func (s *Service) resolveSource(ctx context.Context, src *csi.VolumeContentSource, where *placement, opts *cloud.CreateVolumeOptions) (contentSource, error) {
	switch {
	case src == nil:
		return contentSource{}, nil
	case src.GetSnapshot() != nil:
		id := src.GetSnapshot().GetSnapshotId()
		if err := requireID("source snapshot ID", id); err != nil {
			return contentSource{}, err
		}
		snap, err := s.cloud.GetSnapshot(ctx, id)
		if err != nil {
			return contentSource{}, failed(err, "source snapshot %s", id)
		}
		if !snap.Ready {
			// A snapshot that is still being taken cannot be restored yet;
			// wait for it within the caller's deadline (a retry waits on).
			if snap, err = s.cloud.WaitForSnapshot(ctx, id); err != nil {
				return contentSource{}, failed(err, "wait for source snapshot %s", id)
			}
		}
		if !snap.Ready {
			return contentSource{}, invalidArgument("source snapshot %s is in state %s and cannot be restored", id, snap.State)
		}
		opts.SnapshotID = id
		return contentSource{what: "snapshot " + id, sizeGiB: int64(snap.SizeGiB), layout: snap.Tags[s.tagKey(tagLayout)]}, nil
	case src.GetVolume() != nil:
		id := src.GetVolume().GetVolumeId()
		if err := requireID("source volume ID", id); err != nil {
			return contentSource{}, err
		}
		vol, err := s.cloud.GetVolume(ctx, id)
		if err != nil {
			return contentSource{}, failed(err, "source volume %s", id)
		}
		if !where.allows(vol.Zone, vol.ZoneID) {
			return contentSource{}, status.Errorf(codes.ResourceExhausted,
				"source volume %s is in zone %s, outside the requested topology; a clone is made in its source's zone", id, vol.Zone)
		}
		where.zone, where.zoneID = vol.Zone, ""
		opts.SourceVolumeID = id
		return contentSource{what: "volume " + id, sizeGiB: int64(vol.SizeGiB), layout: vol.Tags[s.tagKey(tagLayout)]}, nil
	default:
		return contentSource{}, invalidArgument("volume content source names neither a snapshot nor a volume")
	}
}

// incompatibility says how an existing volume differs from what a request
// asks for, or "" when it is what the request would create.
func incompatibility(vol *cloud.Volume, r *csi.CapacityRange, where placement, opts *cloud.CreateVolumeOptions) string {
	switch {
	case !fitsRange(vol.SizeGiB, r):
		return fmt.Sprintf("its size %d GiB is outside the requested capacity range", vol.SizeGiB)
	case vol.Type != "" && vol.Type != opts.Type:
		return fmt.Sprintf("it is of type %s, not %s", vol.Type, opts.Type)
	case vol.SnapshotID != opts.SnapshotID:
		return "it was not restored from the requested snapshot"
	case vol.SourceVolumeID != opts.SourceVolumeID:
		return "it was not cloned from the requested volume"
	case !where.allows(vol.Zone, vol.ZoneID):
		return fmt.Sprintf("it is in zone %s, outside the requested topology", vol.Zone)
	case vol.MultiAttach != opts.MultiAttach:
		return "its multi-attach setting differs"
	case opts.Encrypted && !vol.Encrypted:
		return "it is not encrypted"
	}
	return ""
}

// DeleteVolume deletes a volume. A volume that does not exist (any more) is
// success; one still attached somewhere is FailedPrecondition.
func (s *Service) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := requireID("volume ID", id); err != nil {
		return nil, err
	}
	key := inflight.Volume(id)
	release, ok := s.inFlight.TryAcquire(key)
	if !ok {
		return nil, busy(key)
	}
	defer release()
	err := s.cloud.DeleteVolume(ctx, id)
	switch {
	case errors.Is(err, cloud.ErrNotFound):
		klog.V(4).InfoS("Volume to delete does not exist", "volumeID", id)
	case err != nil:
		return nil, failed(err, "delete volume %s", id)
	default:
		klog.V(2).InfoS("Deleted volume", "volumeID", id)
	}
	return &csi.DeleteVolumeResponse{}, nil
}

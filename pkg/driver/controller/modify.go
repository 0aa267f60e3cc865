package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/cloud"
)

// modifyRequest is one ControllerExpandVolume or ControllerModifyVolume, or
// several merged within the coalesce window. Zero fields change nothing.
type modifyRequest struct {
	// volume is the size (grow to at least), type, IOPS and throughput.
	volume cloud.VolumeModification
	// setTags and deleteTags change the volume's tags.
	setTags    map[string]string
	deleteTags []string
}

// mergeModifyRequests folds an incoming request into the pending one for the
// same volume. Sizes combine to the larger (both callers asked for "at
// least"); any other field given by both with different values is a
// conflict, which fails the incoming caller alone with Aborted: it retries
// once the pending change is done and then sees the volume as it is.
func mergeModifyRequests(merged, in modifyRequest) (modifyRequest, error) {
	conflict := func(what string, a, b any) error {
		return status.Errorf(codes.Aborted,
			"%s %v conflicts with %v in a change to the same volume that is about to run; retry after it completes", what, b, a)
	}
	out := modifyRequest{
		volume:     merged.volume,
		setTags:    maps.Clone(merged.setTags),
		deleteTags: slices.Clone(merged.deleteTags),
	}
	out.volume.SizeGiB = max(merged.volume.SizeGiB, in.volume.SizeGiB)
	if a, b := merged.volume.Type, in.volume.Type; b != "" {
		if a != "" && a != b {
			return modifyRequest{}, conflict("volume type", a, b)
		}
		out.volume.Type = b
	}
	if a, b := merged.volume.IOPS, in.volume.IOPS; b != 0 {
		if a != 0 && a != b {
			return modifyRequest{}, conflict("iops", a, b)
		}
		out.volume.IOPS = b
	}
	if a, b := merged.volume.Throughput, in.volume.Throughput; b != 0 {
		if a != 0 && a != b {
			return modifyRequest{}, conflict("throughput", a, b)
		}
		out.volume.Throughput = b
	}
	for k, v := range in.setTags {
		if prev, ok := out.setTags[k]; ok && prev != v {
			return modifyRequest{}, conflict(fmt.Sprintf("tag %q value", k), prev, v)
		}
		if slices.Contains(out.deleteTags, k) {
			return modifyRequest{}, conflict(fmt.Sprintf("tag %q", k), "removed", "set")
		}
		if out.setTags == nil {
			out.setTags = map[string]string{}
		}
		out.setTags[k] = v
	}
	for _, k := range in.deleteTags {
		if _, ok := out.setTags[k]; ok {
			return modifyRequest{}, conflict(fmt.Sprintf("tag %q", k), "set", "removed")
		}
		if !slices.Contains(out.deleteTags, k) {
			out.deleteTags = append(out.deleteTags, k)
		}
	}
	return out, nil
}

// modifyOutcome is what one execution of a merged request did. sizeErr is
// the outcome of its size (what ControllerExpandVolume asked), settingsErr
// of the rest (what ControllerModifyVolume asked); they differ only when
// EC2 refused the merged change and the size was made on its own.
type modifyOutcome struct {
	vol                  *cloud.Volume
	sizeErr, settingsErr error
}

// executeModify carries out one merged request (see applyModify). When EC2
// refuses a change that merges a new size with new settings, the request's
// fault may be in either part; the size is then made on its own, so a valid
// resize is not failed by an invalid VolumeAttributesClass sent at the same
// moment, and the settings' callers get EC2's refusal.
func (s *Service) executeModify(ctx context.Context, volumeID string, req modifyRequest) (*modifyOutcome, error) {
	vol, err := s.applyModify(ctx, volumeID, req)
	if err == nil {
		return &modifyOutcome{vol: vol}, nil
	}
	if req.volume.SizeGiB == 0 || !req.changesSettings() || !errors.Is(err, cloud.ErrInvalidArgument) {
		return nil, err
	}
	klog.InfoS("EC2 refused the merged change; growing the volume on its own", "volumeID", volumeID,
		"sizeGiB", req.volume.SizeGiB, "err", err)
	vol, sizeErr := s.applyModify(ctx, volumeID, modifyRequest{volume: cloud.VolumeModification{SizeGiB: req.volume.SizeGiB}})
	return &modifyOutcome{vol: vol, sizeErr: sizeErr, settingsErr: err}, nil
}

// changesSettings reports whether the request asks for more than a size.
func (r modifyRequest) changesSettings() bool {
	v := r.volume
	return v.Type != "" || v.IOPS != 0 || v.Throughput != 0 || len(r.setTags) > 0 || len(r.deleteTags) > 0
}

// applyModify carries out one request: first the volume change (a single
// EC2 ModifyVolume, skipped when the volume already is what was asked for),
// then the tags, so a change EC2 refuses leaves the tags untouched. It
// returns the volume as it is afterwards.
func (s *Service) applyModify(ctx context.Context, volumeID string, req modifyRequest) (*cloud.Volume, error) {
	vol, err := s.cloud.GetVolume(ctx, volumeID)
	if err != nil {
		return nil, err
	}
	mod := req.volume
	if mod.SizeGiB <= vol.SizeGiB {
		mod.SizeGiB = 0
	}
	if mod.Type == vol.Type {
		mod.Type = ""
	}
	if mod.Type == "" {
		// Without a type change EC2 keeps IOPS and throughput as they are,
		// so asking for the current values changes nothing.
		if mod.IOPS == vol.IOPS {
			mod.IOPS = 0
		}
		if mod.Throughput == vol.Throughput {
			mod.Throughput = 0
		}
	}
	if !mod.IsEmpty() {
		klog.V(2).InfoS("Modifying volume", "volumeID", volumeID, "sizeGiB", mod.SizeGiB, "type", mod.Type,
			"iops", mod.IOPS, "throughput", mod.Throughput)
		if vol, err = s.cloud.ModifyVolume(ctx, volumeID, mod); err != nil {
			return nil, err
		}
	}
	if len(req.setTags) > 0 || len(req.deleteTags) > 0 {
		if err := s.cloud.UpdateTags(ctx, volumeID, req.setTags, req.deleteTags); err != nil {
			return nil, err
		}
		klog.V(2).InfoS("Updated volume tags", "volumeID", volumeID, "set", len(req.setTags), "removed", len(req.deleteTags))
	}
	return vol, nil
}

// ControllerExpandVolume grows a volume to at least the requested size. It
// shares one EC2 ModifyVolume with a ControllerModifyVolume for the same
// volume that arrives within the coalesce window. A volume already as large
// is success at once. Filesystem volumes then need the node to grow the
// filesystem; raw block volumes do not.
func (s *Service) ControllerExpandVolume(ctx context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := requireID("volume ID", id); err != nil {
		return nil, err
	}
	r := req.GetCapacityRange()
	required, limit := r.GetRequiredBytes(), r.GetLimitBytes()
	if required <= 0 && limit <= 0 {
		return nil, invalidArgument("capacity range is missing")
	}
	if required < 0 || limit < 0 || (limit > 0 && required > limit) {
		return nil, invalidArgument("capacity range (required %d, limit %d bytes) is not valid", required, limit)
	}
	if required == 0 {
		required = limit - limit%GiB
	}
	sizeGiB := ceilGiB(required)
	if limit > 0 && sizeGiB*GiB > limit {
		return nil, status.Errorf(codes.OutOfRange, "no whole number of GiB fits between %d and %d bytes: EBS sizes volumes in GiB", required, limit)
	}
	if c := req.GetVolumeCapability(); c != nil {
		if _, err := checkCapabilities([]*csi.VolumeCapability{c}); err != nil {
			return nil, err
		}
	}
	nodeExpansion := req.GetVolumeCapability().GetBlock() == nil

	vol, err := s.cloud.GetVolume(ctx, id)
	if err != nil {
		return nil, failed(err, "volume %s", id)
	}
	if int64(vol.SizeGiB) >= sizeGiB {
		return &csi.ControllerExpandVolumeResponse{CapacityBytes: int64(vol.SizeGiB) * GiB, NodeExpansionRequired: nodeExpansion}, nil
	}
	if bounds, known := sizeLimits[vol.Type]; known && sizeGiB > bounds.max {
		return nil, status.Errorf(codes.OutOfRange, "%d GiB is more than the %d GiB maximum of volume type %s", sizeGiB, bounds.max, vol.Type)
	}
	out, err := s.modifier.Do(ctx, id, modifyRequest{volume: cloud.VolumeModification{SizeGiB: int32(sizeGiB)}})
	if err == nil {
		err = out.sizeErr
	}
	if err != nil {
		return nil, failed(err, "expand volume %s to %d GiB", id, sizeGiB)
	}
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: int64(out.vol.SizeGiB) * GiB, NodeExpansionRequired: nodeExpansion}, nil
}

// ControllerModifyVolume applies a VolumeAttributesClass's mutable
// parameters: type, IOPS and throughput through EC2 ModifyVolume (shared
// with a ControllerExpandVolume arriving within the coalesce window), tags
// through the tag API alone. Keys the class does not give stay as they are,
// so a request without mutable parameters changes nothing (once the volume
// is known to exist).
func (s *Service) ControllerModifyVolume(ctx context.Context, req *csi.ControllerModifyVolumeRequest) (*csi.ControllerModifyVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := requireID("volume ID", id); err != nil {
		return nil, err
	}
	m, err := s.params.Modification(req.GetMutableParameters())
	if err != nil {
		return nil, invalidArgument("%v", err)
	}
	vol, err := s.cloud.GetVolume(ctx, id)
	if err != nil {
		return nil, failed(err, "volume %s", id)
	}
	if err := m.CheckVolumeType(vol.Type); err != nil {
		return nil, invalidArgument("%v", err)
	}
	if m.Volume.IsEmpty() && !m.ChangesTags() {
		return &csi.ControllerModifyVolumeResponse{}, nil
	}
	out, err := s.modifier.Do(ctx, id, modifyRequest{volume: m.Volume, setTags: m.SetTags, deleteTags: m.DeleteTags})
	if err == nil {
		err = out.settingsErr
	}
	if err != nil {
		return nil, failed(err, "modify volume %s", id)
	}
	return &csi.ControllerModifyVolumeResponse{}, nil
}

package controller

import (
	"context"
	"errors"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/cloud"
	"github.com/diskplane/diskplane/pkg/driver/volumecontext"
	"github.com/diskplane/diskplane/pkg/inflight"
)

// ControllerPublishVolume attaches a volume to the instance that is the
// node and returns the device name in the publish context. Attaching a
// volume already attached there returns the same device; a volume attached
// to another node is FailedPrecondition naming it, unless the capability is
// multi-node (then the volume must be multi-attach). A multi-attach volume
// published with a single-node capability is served to one node at a time
// like any other.
func (s *Service) ControllerPublishVolume(ctx context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	volumeID, nodeID := req.GetVolumeId(), req.GetNodeId()
	if err := requireID("volume ID", volumeID); err != nil {
		return nil, err
	}
	if err := requireID("node ID", nodeID); err != nil {
		return nil, err
	}
	if req.GetVolumeCapability() == nil {
		return nil, invalidArgument("volume capability is missing")
	}
	caps, err := checkCapabilities([]*csi.VolumeCapability{req.GetVolumeCapability()})
	if err != nil {
		return nil, err
	}
	key := inflight.Attachment(volumeID, nodeID)
	release, ok := s.inFlight.TryAcquire(key)
	if !ok {
		return nil, busy(key)
	}
	defer release()

	vol, err := s.cloud.GetVolume(ctx, volumeID)
	if err != nil {
		return nil, failed(err, "volume %s", volumeID)
	}
	if why := checkVolumeSupports(vol, caps); why != "" {
		return nil, invalidArgument("%s", why)
	}
	if vol.MultiAttach && !caps.multiNode {
		// Publishes of one volume to two nodes at once must not both see
		// it free: one at a time for the whole volume.
		key := inflight.Volume(volumeID)
		release, ok := s.inFlight.TryAcquire(key)
		if !ok {
			return nil, busy(key)
		}
		defer release()
	}
	device, err := s.cloud.AttachVolume(ctx, volumeID, nodeID, cloud.AttachOptions{Shared: caps.multiNode, Read: vol})
	if err != nil {
		var elsewhere *cloud.AttachedElsewhereError
		if errors.As(err, &elsewhere) {
			return nil, status.Errorf(codes.FailedPrecondition,
				"volume %s is still attached to node %s; it can be used by one node at a time (a pod on the old node may still hold it)",
				volumeID, strings.Join(elsewhere.InstanceIDs, ", "))
		}
		return nil, failed(err, "attach volume %s to node %s", volumeID, nodeID)
	}
	klog.V(2).InfoS("Attached volume", "volumeID", volumeID, "nodeID", nodeID, "devicePath", device)
	return &csi.ControllerPublishVolumeResponse{
		PublishContext: map[string]string{volumecontext.DevicePathKey: device},
	}, nil
}

// ControllerUnpublishVolume detaches a volume from a node, or from every
// node when the request names none. A volume or node that no longer exists,
// or a volume not attached there, is success: there is nothing to detach.
func (s *Service) ControllerUnpublishVolume(ctx context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	volumeID, nodeID := req.GetVolumeId(), req.GetNodeId()
	if err := requireID("volume ID", volumeID); err != nil {
		return nil, err
	}
	key := inflight.Attachment(volumeID, nodeID)
	release, ok := s.inFlight.TryAcquire(key)
	if !ok {
		return nil, busy(key)
	}
	defer release()

	nodes := []string{nodeID}
	if nodeID == "" {
		vol, err := s.cloud.GetVolume(ctx, volumeID)
		if errors.Is(err, cloud.ErrNotFound) {
			return &csi.ControllerUnpublishVolumeResponse{}, nil
		}
		if err != nil {
			return nil, failed(err, "volume %s", volumeID)
		}
		nodes = publishedNodes(vol)
	}
	for _, node := range nodes {
		err := s.cloud.DetachVolume(ctx, volumeID, node)
		switch {
		case errors.Is(err, cloud.ErrNotFound):
			klog.V(4).InfoS("Volume is not attached to the node", "volumeID", volumeID, "nodeID", node)
		case err != nil:
			return nil, failed(err, "detach volume %s from node %s", volumeID, node)
		default:
			klog.V(2).InfoS("Detached volume", "volumeID", volumeID, "nodeID", node)
		}
	}
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}

// publishedNodes lists the nodes a volume is attached (or attaching) to.
func publishedNodes(v *cloud.Volume) []string {
	var nodes []string
	for _, a := range v.Attachments {
		if a.State != "detached" && a.InstanceID != "" {
			nodes = append(nodes, a.InstanceID)
		}
	}
	return nodes
}

// ValidateVolumeCapabilities confirms the capabilities (and parameters, when
// given) an existing volume can serve. A capability EBS cannot serve at all
// is InvalidArgument; one this volume cannot serve (multi-node access on a
// volume without multi-attach) is answered unconfirmed with the reason.
func (s *Service) ValidateVolumeCapabilities(ctx context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	id := req.GetVolumeId()
	if err := requireID("volume ID", id); err != nil {
		return nil, err
	}
	caps, err := checkCapabilities(req.GetVolumeCapabilities())
	if err != nil {
		return nil, err
	}
	if len(req.GetParameters()) > 0 || len(req.GetMutableParameters()) > 0 {
		if _, err := s.params.Volume(req.GetParameters(), req.GetMutableParameters(), caps.fsType); err != nil {
			return nil, invalidArgument("%v", err)
		}
	}
	vol, err := s.cloud.GetVolume(ctx, id)
	if err != nil {
		return nil, failed(err, "volume %s", id)
	}
	if why := checkVolumeSupports(vol, caps); why != "" {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: why}, nil
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
		MutableParameters:  req.GetMutableParameters(),
	}}, nil
}

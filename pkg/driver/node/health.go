package node

import (
	"context"
	"errors"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/driver/volumehealth"
	"github.com/diskplane/diskplane/pkg/health"
	"github.com/diskplane/diskplane/pkg/mounter"
)

// healthChecker is the node's OS as a health checker, when it can tell a
// volume's health (Linux).
func (s *Service) healthChecker() (mounter.HealthChecker, bool) {
	h, ok := s.os.(mounter.HealthChecker)
	return h, ok
}

// healthCapabilities are the node capabilities of volume health, offered
// where the OS can tell it: the volume condition in NodeGetVolumeStats
// (CSI 1.12's VOLUME_CONDITION, which the kubelet reads) and CSI 1.13's
// NodeGetVolumeHealth.
func (s *Service) healthCapabilities() []*csi.NodeServiceCapability {
	if _, ok := s.healthChecker(); !ok {
		return nil
	}
	var caps []*csi.NodeServiceCapability
	for _, c := range []csi.NodeServiceCapability_RPC_Type{volumehealth.NodeVolumeCondition, csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH} {
		caps = append(caps, &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: c}}})
	}
	return caps
}

// NodeGetVolumeStats reports the capacity and use of a published or staged
// volume (volumeStats) and, where the OS can tell, its condition: what is
// wrong with its device, its filesystem or its mount, read from the kernel
// without touching the volume's data. A mount so broken that it cannot be
// measured (stale, or a filesystem shut down) is answered with its
// condition alone, which the kubelet (CSIVolumeHealth) turns into an event
// on the pod.
func (s *Service) NodeGetVolumeStats(ctx context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	resp, err := s.volumeStats(ctx, req)
	h, ok := s.healthChecker()
	if !ok {
		return resp, err
	}
	path := req.GetVolumePath()
	if err != nil {
		if status.Code(err) != codes.Internal {
			return nil, err
		}
		if _, perr := s.os.PathExists(path); !mounter.IsCorruptedMount(perr) {
			return nil, err
		}
		klog.V(2).InfoS("Volume path cannot be measured; reporting its condition only", "volumeID", req.GetVolumeId(), "path", path, "err", err)
		resp = &csi.NodeGetVolumeStatsResponse{}
	}
	report, herr := h.VolumeHealth(ctx, req.GetVolumeId(), []string{path})
	if herr != nil {
		if err != nil {
			return nil, err
		}
		klog.ErrorS(herr, "Could not check the volume's health", "volumeID", req.GetVolumeId(), "path", path)
		report = health.Report{Notes: []string{"its health could not be checked: " + herr.Error()}}
	}
	s.reportRevocation(req.GetVolumeId(), path, &report)
	logAbnormal(req.GetVolumeId(), report)
	volumehealth.SetCondition(resp, report)
	return resp, nil
}

// NodeGetVolumeHealth reports what is wrong with a volume on this node
// (CSI 1.13): at the paths given, and through its device when no path shows
// it mounted, so that the health of a volume that failed to stage can be
// asked for too. A volume neither mounted nor attached here is NotFound.
func (s *Service) NodeGetVolumeHealth(ctx context.Context, req *csi.NodeGetVolumeHealthRequest) (*csi.NodeGetVolumeHealthResponse, error) {
	id := req.GetVolumeId()
	if err := checkVolumeID(id); err != nil {
		return nil, err
	}
	var paths []string
	for _, p := range []struct{ what, path string }{
		{"volume publish path", req.GetVolumePublishPath()}, {"staging target path", req.GetStagingTargetPath()},
	} {
		if p.path == "" {
			continue
		}
		if err := checkPath(p.what, p.path); err != nil {
			return nil, err
		}
		paths = append(paths, p.path)
	}
	h, ok := s.healthChecker()
	if !ok {
		return nil, status.Error(codes.Unimplemented, "this node's operating system cannot tell a volume's health")
	}
	report, err := h.VolumeHealth(ctx, id, paths)
	switch {
	case errors.Is(err, mounter.ErrNotOnNode):
		return nil, status.Errorf(codes.NotFound, "%v", err)
	case err != nil:
		return nil, status.Errorf(codes.Internal, "health of volume %s: %v", id, err)
	}
	s.reportRevocation(id, req.GetVolumePublishPath(), &report)
	logAbnormal(id, report)
	return &csi.NodeGetVolumeHealthResponse{VolumeHealth: volumehealth.VolumeHealth(id, report)}, nil
}

// logAbnormal logs what is wrong with a volume, once per check.
func logAbnormal(volumeID string, r health.Report) {
	if r.Abnormal() {
		klog.V(2).InfoS("Volume is abnormal", "volumeID", volumeID, "condition", r.Message())
	}
}

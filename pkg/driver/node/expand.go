package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/mounter"
)

// NodeExpandVolume grows the filesystem of a mounted volume to the size of
// its device, online, after the controller grew the volume (EC2
// ModifyVolume). For a block volume there is nothing to grow. A volume
// encrypted on the node first has its LUKS mapping grown, with the
// passphrase of the node-expand secret (the volume key is in the kernel's
// keyring, out of the plugin's reach). Either way the capacity returned is
// the volume's device's size as measured now.
func (s *Service) NodeExpandVolume(ctx context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	r, err := s.parseExpand(req)
	defer wipe(r.passphrase)
	if err != nil {
		return nil, err
	}
	volumeID, volumePath, block := r.volumeID, r.volumePath, r.block
	release, err := s.acquire(volumeID)
	if err != nil {
		return nil, err
	}
	defer release()

	if err := s.requireMounted(volumeID, volumePath); err != nil {
		return nil, err
	}
	mapping, under, err := s.os.EncryptedMapping(volumeID)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "find the encrypted mapping of volume %s: %v", volumeID, err)
	}
	if mapping != "" {
		err := s.os.ResizeEncrypted(ctx, volumeID, r.passphrase)
		if errors.Is(err, mounter.ErrPassphraseNeeded) && s.unlocks.setGrowPending(volumeID, true) {
			return nil, status.Errorf(codes.FailedPrecondition, "grow the encrypted mapping of volume %s: %v: its key is in KMS, and the kubelet "+
				"passes no token to NodeExpandVolume; the next NodePublishVolume of a pod allowed to unlock it grows it "+
				"(the kubelet republishes on its own with the CSIDriver's requiresRepublish), and the kubelet's retry of this call then grows the filesystem", volumeID, err)
		}
		if err != nil {
			return nil, encryptionError(ctx, fmt.Sprintf("grow the encrypted mapping of volume %s", volumeID), expandSecret, err)
		}
	}
	if !block {
		if block, err = s.os.IsBlockDevice(volumePath); err != nil {
			return nil, status.Errorf(codes.Internal, "check %s: %v", volumePath, err)
		}
	}
	device := volumePath
	if !block {
		if device, err = s.os.MountedDevice(volumePath); err != nil || device == "" {
			return nil, status.Errorf(codes.Internal, "find the device mounted at %s: %v", volumePath, err)
		}
		if err := s.os.VerifyDevice(volumeID, device); err != nil {
			return nil, osError(ctx, fmt.Sprintf("check the device at %s", volumePath), err)
		}
		if err := s.growFilesystem(device, volumePath); err != nil {
			return nil, osError(ctx, fmt.Sprintf("grow the filesystem of volume %s", volumeID), err)
		}
	}
	if mapping != "" {
		// The volume's size, not the mapping's, which is smaller by the LUKS
		// header: the capacity a claim asks for is the volume's.
		device = under
	}
	size, err := s.os.DeviceSize(device)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "measure volume %s: %v", volumeID, err)
	}
	if required := r.requiredBytes; size < required {
		return nil, status.Errorf(codes.FailedPrecondition,
			"volume %s is %d bytes on this node, less than the %d requested: the volume's modification has not reached the device yet", volumeID, size, required)
	}
	klog.V(2).InfoS("Expanded volume", "volumeID", volumeID, "volumePath", volumePath, "block", block, "bytes", size)
	return &csi.NodeExpandVolumeResponse{CapacityBytes: size}, nil
}

// requireMounted answers NotFound unless path is a mount point of this
// node: an unmounted directory is not a volume, and measuring it would
// report the node's root filesystem.
func (s *Service) requireMounted(volumeID, path string) error {
	exists, err := s.os.PathExists(path)
	if err != nil {
		return status.Errorf(codes.Internal, "check %s: %v", path, err)
	}
	if !exists {
		return status.Errorf(codes.NotFound, "volume %s: path %s does not exist", volumeID, path)
	}
	mounted, err := s.os.IsMountPoint(path)
	if err != nil {
		return status.Errorf(codes.Internal, "check whether %s is mounted: %v", path, err)
	}
	if !mounted {
		return status.Errorf(codes.NotFound, "volume %s: %s is not a mounted volume", volumeID, path)
	}
	return nil
}

// volumeStats reports the capacity and use of a published or staged
// volume: bytes and inodes for a filesystem, the size for a block device.
// NodeGetVolumeStats (health.go) adds the volume's condition.
func (s *Service) volumeStats(_ context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	volumeID, volumePath := req.GetVolumeId(), req.GetVolumePath()
	if err := checkVolumeID(volumeID); err != nil {
		return nil, err
	}
	if err := checkVolumePath(volumeID, volumePath); err != nil {
		return nil, err
	}
	if staging := req.GetStagingTargetPath(); staging != "" {
		if err := checkPath("staging target path", staging); err != nil {
			return nil, err
		}
	}
	if err := s.requireMounted(volumeID, volumePath); err != nil {
		return nil, err
	}
	block, err := s.os.IsBlockDevice(volumePath)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "check %s: %v", volumePath, err)
	}
	if block {
		size, err := s.os.DeviceSize(volumePath)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "measure block volume %s: %v", volumeID, err)
		}
		return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{{Unit: csi.VolumeUsage_BYTES, Total: size}}}, nil
	}
	st, err := s.os.FilesystemStats(volumePath)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "measure volume %s: %v", volumeID, err)
	}
	return &csi.NodeGetVolumeStatsResponse{Usage: s.usage(st)}, nil
}

// usage reports bytes, and inodes where the operating system counts them
// (not on Windows: NTFS has no fixed inode table, and csi-proxy reports
// bytes only).
func (s *Service) usage(st mounter.Stats) []*csi.VolumeUsage {
	u := []*csi.VolumeUsage{{Unit: csi.VolumeUsage_BYTES, Total: st.TotalBytes, Available: st.AvailableBytes, Used: st.UsedBytes}}
	if s.platform.Inodes {
		u = append(u, &csi.VolumeUsage{Unit: csi.VolumeUsage_INODES, Total: st.TotalInodes, Available: st.FreeInodes, Used: st.UsedInodes})
	}
	return u
}

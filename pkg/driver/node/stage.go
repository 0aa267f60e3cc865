package node

import (
	"context"
	"fmt"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/driver/volumecontext"
	"github.com/diskplane/diskplane/pkg/mounter"
)

// NodeStageVolume finds the volume's device, proves it is the volume,
// formats it if (and only if) it is blank, mounts it at the staging path and
// grows the filesystem if the volume was expanded while detached. A volume
// encrypted on the node is first opened as a LUKS mapping (formatted as
// LUKS2 when blank) with the passphrase of the node-stage secret, and the
// rest happens on the mapping. A plain block volume needs none of this: it
// is bind-mounted straight from the device at publish time; an encrypted
// one is staged by opening its mapping. A volume whose key KMS wraps is only
// verified: the kubelet passes the token that unlocks it to
// NodePublishVolume alone, which does the rest (unlockForPublish).
func (s *Service) NodeStageVolume(ctx context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	r, err := s.parseStage(req)
	defer wipe(r.passphrase)
	if err != nil {
		return nil, err
	}
	v := r.volume
	if v.block && !v.encrypted() {
		return &csi.NodeStageVolumeResponse{}, nil
	}
	release, err := s.acquire(r.volumeID)
	if err != nil {
		return nil, err
	}
	defer release()

	device, err := s.findDevice(ctx, r.volumeID, r.devicePath)
	if err != nil {
		return nil, err
	}
	switch v.keys {
	case fromKMSKey:
		klog.V(2).InfoS("Verified the device of a volume whose key is in KMS; each pod's publish unlocks it", "volumeID", r.volumeID, "device", device)
		return &csi.NodeStageVolumeResponse{}, nil
	case fromSecret:
		if device, err = s.openEncrypted(ctx, r.volumeID, device, mounter.LUKSKey{Secret: r.passphrase}, stageSecret); err != nil {
			return nil, err
		}
		if v.block {
			klog.V(2).InfoS("Staged encrypted block volume", "volumeID", r.volumeID, "mapping", device)
			return &csi.NodeStageVolumeResponse{}, nil
		}
	}
	if err := s.mountStaging(ctx, r.volumeID, device, r.staging, v); err != nil {
		return nil, err
	}
	return &csi.NodeStageVolumeResponse{}, nil
}

// mountStaging mounts a verified device (or an encrypted volume's mapping)
// at the staging path, formatting it when blank, and grows the filesystem
// if the volume was expanded while it was detached. A staging path that
// holds the device already is left as it is (and grown); one that holds
// anything else is refused.
func (s *Service) mountStaging(ctx context.Context, volumeID, device, staging string, v volumeSpec) error {
	mounted, err := s.prepareMountPoint(staging, s.os.MakeDir)
	if err != nil {
		return err
	}
	if mounted {
		current, err := s.os.MountedDevice(staging)
		if err != nil {
			return status.Errorf(codes.Internal, "read what is mounted at %s: %v", staging, err)
		}
		if current != device {
			return status.Errorf(codes.FailedPrecondition,
				"staging path %s already holds %s, not %s (the device of volume %s)", staging, current, device, volumeID)
		}
		klog.V(4).InfoS("Volume already staged", "volumeID", volumeID, "device", device, "stagingPath", staging)
	} else {
		options := stageMountOptions(v.fsType, v.capability.GetMount().GetMountFlags())
		if err := s.os.FormatAndMount(volumeID, device, staging, v.fsType, v.format.MkfsArgs(v.fsType), options); err != nil {
			return osError(ctx, fmt.Sprintf("mount volume %s (%s) at %s", volumeID, device, staging), err)
		}
		klog.V(2).InfoS("Staged volume", "volumeID", volumeID, "device", device, "fsType", v.fsType, "stagingPath", staging)
	}
	// Grow the filesystem if the volume was expanded while it was detached.
	// Also done for a volume staged already, so a stage that failed here
	// completes on retry.
	if err := s.growFilesystem(device, staging); err != nil {
		return osError(ctx, fmt.Sprintf("grow the filesystem of volume %s", volumeID), err)
	}
	return nil
}

// stageMountOptions are the capability's mount flags, plus nouuid for xfs:
// a clone or a restored snapshot has the same filesystem UUID as its source,
// and xfs refuses to mount a second filesystem with a UUID already mounted.
func stageMountOptions(fsType string, flags []string) []string {
	options := slices.Clone(flags)
	if fsType == volumecontext.FSTypeXFS && !slices.Contains(options, "nouuid") {
		options = append(options, "nouuid")
	}
	return options
}

func (s *Service) growFilesystem(device, mountPath string) error {
	need, err := s.os.NeedResize(device, mountPath)
	if err != nil || !need {
		return err
	}
	if err := s.os.Resize(device, mountPath); err != nil {
		return err
	}
	klog.V(4).InfoS("Checked filesystem size against its device", "device", device, "mountPath", mountPath)
	return nil
}

// prepareMountPoint makes sure path exists (creating it with create) and
// reports whether something is mounted there. A corrupted mount (its
// backing gone: stale handle, transport endpoint not connected) is
// unmounted first, so it is made again.
func (s *Service) prepareMountPoint(path string, create func(string) error) (bool, error) {
	exists, err := s.os.PathExists(path)
	if err != nil {
		if !mounter.IsCorruptedMount(err) {
			return false, status.Errorf(codes.Internal, "check %s: %v", path, err)
		}
		klog.InfoS("Unmounting corrupted mount to mount it again", "path", path, "err", err)
		if err := s.os.Unmount(path); err != nil {
			return false, status.Errorf(codes.Internal, "unmount corrupted mount at %s: %v", path, err)
		}
		exists = true
	}
	if !exists {
		if err := create(path); err != nil {
			return false, status.Errorf(codes.Internal, "create %s: %v", path, err)
		}
		return false, nil
	}
	mounted, err := s.os.IsMountPoint(path)
	if err != nil {
		return false, status.Errorf(codes.Internal, "check whether %s is mounted: %v", path, err)
	}
	return mounted, nil
}

// NodeUnstageVolume unmounts the staging path and closes the volume's LUKS
// mapping, if it has one. The directory itself belongs to the CO, which
// removes it; a path that is gone or not mounted means the unmount is
// done, and a mapping that is not open means the close is, so a call that
// follows a crash between the two completes the second.
func (s *Service) NodeUnstageVolume(ctx context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	volumeID, staging := req.GetVolumeId(), req.GetStagingTargetPath()
	if err := checkVolumeID(volumeID); err != nil {
		return nil, err
	}
	if err := checkPath("staging target path", staging); err != nil {
		return nil, err
	}
	release, err := s.acquire(volumeID)
	if err != nil {
		return nil, err
	}
	defer release()

	mounted, err := s.stagedAt(staging)
	if err != nil {
		return nil, err
	}
	if mounted {
		if err := s.os.Unmount(staging); err != nil {
			return nil, status.Errorf(codes.Internal, "unstage volume %s: %v", volumeID, err)
		}
		klog.V(2).InfoS("Unstaged volume", "volumeID", volumeID, "stagingPath", staging)
	}
	if err := s.closeEncrypted(ctx, volumeID); err != nil {
		return nil, err
	}
	s.unlocks.forget(volumeID)
	return &csi.NodeUnstageVolumeResponse{}, nil
}

// stagedAt reports whether something is mounted at a staging path that may
// be gone; a corrupted mount counts as mounted, so it is unmounted.
func (s *Service) stagedAt(staging string) (bool, error) {
	exists, err := s.os.PathExists(staging)
	switch {
	case err != nil && mounter.IsCorruptedMount(err):
		return true, nil
	case err != nil:
		return false, status.Errorf(codes.Internal, "check %s: %v", staging, err)
	case !exists:
		return false, nil
	}
	mounted, err := s.os.IsMountPoint(staging)
	if err != nil {
		return false, status.Errorf(codes.Internal, "check whether %s is mounted: %v", staging, err)
	}
	return mounted, nil
}

package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// NodePublishVolume makes the volume visible to one pod: it bind-mounts the
// staged filesystem onto the target directory, or, for a block volume, the
// verified device node onto a file at the target, read-only when the request
// or a reader-only access mode says so. A target that is already mounted
// means the volume is published, if it is as read-only as asked; a
// corrupted one is made again. A volume whose key KMS wraps is first
// unlocked with the pod's own service-account token (unlockForPublish):
// only here does the kubelet pass one.
func (s *Service) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	r, err := s.parsePublish(req)
	if err != nil {
		return nil, err
	}
	options := publishMountOptions(r.readOnly, r.volume.capability.GetMount().GetMountFlags())
	release, err := s.acquire(r.volumeID)
	if err != nil {
		return nil, err
	}
	defer release()

	if r.volume.block {
		return s.publishBlock(ctx, r, options)
	}
	authorized := func() {}
	if r.volume.keys == fromKMSKey {
		answered, commit, err := s.unlockForPublish(ctx, r)
		if err != nil {
			return nil, err
		}
		if answered {
			return &csi.NodePublishVolumeResponse{}, nil
		}
		authorized = commit
	}
	staged, err := s.os.IsMountPoint(r.staging)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, status.Errorf(codes.Internal, "check whether volume %s is staged at %s: %v", r.volumeID, r.staging, err)
	}
	if !staged {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is not staged at %s; stage it first", r.volumeID, r.staging)
	}
	if err := s.checkSingleWriter(r, r.staging); err != nil {
		return nil, err
	}
	mounted, err := s.prepareMountPoint(r.target, s.os.MakeDir)
	if err != nil {
		return nil, err
	}
	if mounted {
		if err := s.checkSamePublication(r.volumeID, r.target, options); err != nil {
			return nil, err
		}
		klog.V(4).InfoS("Volume already published", "volumeID", r.volumeID, "targetPath", r.target)
		authorized()
		return &csi.NodePublishVolumeResponse{}, nil
	}
	if err := s.os.BindMount(r.staging, r.target, options); err != nil {
		return nil, osError(ctx, fmt.Sprintf("publish volume %s at %s", r.volumeID, r.target), err)
	}
	authorized()
	klog.V(2).InfoS("Published volume", "volumeID", r.volumeID, "targetPath", r.target, "readOnly", slices.Contains(options, "ro"))
	return &csi.NodePublishVolumeResponse{}, nil
}

// publishBlock bind-mounts the volume's device node onto a file at the
// target path; for a volume encrypted on the node, the node of its LUKS
// mapping, which NodeStageVolume opened.
func (s *Service) publishBlock(ctx context.Context, r publishRequest, options []string) (*csi.NodePublishVolumeResponse, error) {
	volumeID, target := r.volumeID, r.target
	device, err := s.findDevice(ctx, volumeID, r.devicePath)
	if err != nil {
		return nil, err
	}
	if r.volume.encrypted() {
		if device, err = s.stagedMapping(volumeID, device); err != nil {
			return nil, err
		}
	}
	if err := s.checkSingleWriter(r, device); err != nil {
		return nil, err
	}
	mounted, err := s.prepareMountPoint(target, s.os.MakeFile)
	if err != nil {
		return nil, err
	}
	if mounted {
		if err := s.checkSamePublication(volumeID, target, options); err != nil {
			return nil, err
		}
		klog.V(4).InfoS("Block volume already published", "volumeID", volumeID, "targetPath", target)
		return &csi.NodePublishVolumeResponse{}, nil
	}
	if err := s.os.BindMount(device, target, options); err != nil {
		return nil, osError(ctx, fmt.Sprintf("publish block volume %s at %s", volumeID, target), err)
	}
	klog.V(2).InfoS("Published block volume", "volumeID", volumeID, "device", device, "targetPath", target, "readOnly", slices.Contains(options, "ro"))
	return &csi.NodePublishVolumeResponse{}, nil
}

// checkReadOnlyPublish refuses to publish a volume of a reader-only access
// mode where the publication cannot be read-only itself (a Windows
// symlink) and the request does not say readonly: the container runtime
// mounts the volume read-only into the pod only when the kubelet's publish
// says so (the pod's or the PersistentVolume's readOnly), so the pod could
// write to a read-only volume.
func (s *Service) checkReadOnlyPublish(volumeID string, v volumeSpec, readonly bool) error {
	if s.platform.ReadOnlyPublish || v.block || !readerOnly(v.capability) || readonly {
		return nil
	}
	return status.Errorf(codes.InvalidArgument,
		"volume %s has the read-only access mode %s, but a %s node cannot make its publication read-only and the request is not readonly: "+
			"set readOnly: true on the pod's volume (persistentVolumeClaim.readOnly) or on the PersistentVolume (csi.readOnly)",
		volumeID, v.capability.GetAccessMode().GetMode(), s.platform.OS)
}

// checkSamePublication answers a NodePublishVolume whose target is mounted
// already. A repeat of the same publication succeeds again; one that asks
// for the other read-only state is ALREADY_EXISTS, as the spec says for a
// volume published at the target with an incompatible readonly flag:
// answering OK would leave a pod writing to what it asked to be read-only,
// or failing writes it was promised. Where a publication has no read-only
// state of its own (a Windows symlink; the container runtime makes the
// pod's mount read-only), there is nothing to compare.
func (s *Service) checkSamePublication(volumeID, target string, options []string) error {
	if !s.platform.ReadOnlyPublish {
		return nil
	}
	readOnly, err := s.os.MountedReadOnly(target)
	if err != nil {
		return status.Errorf(codes.Internal, "check how volume %s is published at %s: %v", volumeID, target, err)
	}
	if want := slices.Contains(options, "ro"); readOnly != want {
		return status.Errorf(codes.AlreadyExists,
			"volume %s is published at %s with read-only %t, and this request asks for read-only %t; unpublish it first",
			volumeID, target, readOnly, want)
	}
	return nil
}

// checkSingleWriter refuses to publish a SINGLE_NODE_SINGLE_WRITER volume
// at a second target path, with FAILED_PRECONDITION as the spec's table for
// a second NodePublishVolume says: the mode allows one publication on the
// node. source is what a publication binds (the staging path, or the device
// node of a block volume); every other mount of it is a publication. It
// runs before the target is created, so a refusal leaves nothing behind;
// a repeat of the same publication passes. SINGLE_NODE_WRITER is not held
// to one target: COs that predate the single/multi writer modes use it for
// every pod of the node that shares a ReadWriteOnce volume.
func (s *Service) checkSingleWriter(r publishRequest, source string) error {
	if r.volume.capability.GetAccessMode().GetMode() != csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER {
		return nil
	}
	target := filepath.Clean(r.target)
	if mounted, err := s.os.IsMountPoint(target); err == nil && mounted {
		return nil // published here already: the repeat is answered as such
	}
	refs, err := s.os.MountRefs(source)
	if err != nil {
		return status.Errorf(codes.Internal, "find where volume %s is published: %v", r.volumeID, err)
	}
	for _, ref := range refs {
		if filepath.Clean(ref) != target {
			return status.Errorf(codes.FailedPrecondition,
				"volume %s has access mode SINGLE_NODE_SINGLE_WRITER and is already published at %s; unpublish it there first",
				r.volumeID, ref)
		}
	}
	return nil
}

// publishMountOptions are the bind options: read-only when asked (or when
// the access mode is a reader-only one), plus the capability's mount flags.
func publishMountOptions(readOnly bool, flags []string) []string {
	var options []string
	if readOnly {
		options = append(options, "ro")
	}
	for _, f := range flags {
		if !slices.Contains(options, f) {
			options = append(options, f)
		}
	}
	return options
}

// NodeUnpublishVolume unmounts the target and removes the directory or file
// the publish created there. A target that is gone means the work is done.
// The last publication of a volume whose key KMS wraps also closes it
// (closeUnlocked).
func (s *Service) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	volumeID, target := req.GetVolumeId(), req.GetTargetPath()
	if err := checkVolumeID(volumeID); err != nil {
		return nil, err
	}
	if err := checkPath("target path", target); err != nil {
		return nil, err
	}
	release, err := s.acquire(volumeID)
	if err != nil {
		return nil, err
	}
	defer release()

	if err := s.os.CleanupMountPoint(target); err != nil {
		return nil, osError(ctx, fmt.Sprintf("unpublish volume %s from %s", volumeID, target), err)
	}
	klog.V(2).InfoS("Unpublished volume", "volumeID", volumeID, "targetPath", target)
	if err := s.closeUnlocked(ctx, publication{volumeID: volumeID, target: target}); err != nil {
		return nil, err
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

package node

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/diskplane/diskplane/pkg/driver/volumecontext"
	"github.com/diskplane/diskplane/pkg/inflight"
	"github.com/diskplane/diskplane/pkg/mounter"
)

// volumeIDPattern is an EC2 volume ID: "vol-" and 8 (old format) or 17 (new
// format) hexadecimal digits on AWS; other EC2-compatible clouds use other
// lengths and upper case, so any 8 to 32 letters and digits are accepted.
// The ID ends up in a device link name, so nothing else is.
var volumeIDPattern = regexp.MustCompile(`^vol-[0-9A-Za-z]{8,32}$`)

func checkVolumeID(id string) error {
	if id == "" {
		return status.Error(codes.InvalidArgument, "volume ID is required")
	}
	if !volumeIDPattern.MatchString(id) {
		return status.Errorf(codes.InvalidArgument, "volume ID %q is not an EBS volume ID (vol-…)", id)
	}
	return nil
}

// checkPath accepts an absolute path with no "." or ".." elements (a
// trailing separator is tolerated): the node mounts and removes things at
// these paths as root, so it takes them only in the form the kubelet sends.
// On Windows that is a path with a drive letter, with back or forward
// slashes (c:\var\lib\kubelet\… or c:/var/lib/kubelet/…); the Windows
// mounter turns either into the form csi-proxy takes.
func checkPath(what, p string) error {
	if p == "" {
		return status.Errorf(codes.InvalidArgument, "%s is required", what)
	}
	clean, native := filepath.Clean(p), filepath.FromSlash(p)
	// A volume name longer than a drive letter is a network share or a
	// device path (Windows), never where the kubelet keeps volumes.
	if !filepath.IsAbs(p) || len(filepath.VolumeName(p)) > 2 || (native != clean && native != clean+string(filepath.Separator)) {
		return status.Errorf(codes.InvalidArgument, "%s %q must be an absolute path without . or .. elements", what, p)
	}
	return nil
}

// checkVolumePath checks the volume path of NodeExpandVolume and
// NodeGetVolumeStats. A missing path is a malformed request; a path that is
// not absolute and clean cannot be where this node mounted a volume, so it
// gets the same NotFound as any other path without a volume (which is also
// what csi-sanity expects).
func checkVolumePath(volumeID, p string) error {
	if p == "" {
		return status.Error(codes.InvalidArgument, "volume path is required")
	}
	if checkPath("volume path", p) != nil {
		return status.Errorf(codes.NotFound, "volume %s: %q is not a path where this node mounts volumes", volumeID, p)
	}
	return nil
}

// accessModes are the access modes a node can serve, for mount and for
// block access: the same ones the controller accepts. The MULTI_NODE modes
// are io2 Multi-Attach, which only a raw block device can use safely: no
// common filesystem can be mounted on two nodes at once.
var (
	mountAccessModes = []csi.VolumeCapability_AccessMode_Mode{
		csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
	}
	blockAccessModes = append(slices.Clone(mountAccessModes),
		csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER,
		csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY)
)

// readerOnly reports whether a capability's access mode allows reading
// only; such a volume is bound "ro" even when the request's readonly field
// is false. That makes a filesystem read-only; a raw block device stays
// writable through its node, so there the container's device permissions
// (readOnly in the pod) are what count.
func readerOnly(c *csi.VolumeCapability) bool {
	switch c.GetAccessMode().GetMode() {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
		csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY:
		return true
	}
	return false
}

// checkCapability validates a volume capability against what the node's
// operating system can do and reports whether it asks for raw block access.
func (s *Service) checkCapability(c *csi.VolumeCapability) (block bool, err error) {
	if c == nil {
		return false, status.Error(codes.InvalidArgument, "volume capability is required")
	}
	switch {
	case c.GetBlock() != nil:
		block = true
	case c.GetMount() != nil:
	default:
		return false, status.Error(codes.InvalidArgument, "volume capability must ask for mount or block access")
	}
	modes := mountAccessModes
	if block {
		modes = blockAccessModes
	}
	mode := c.GetAccessMode().GetMode()
	if !slices.Contains(modes, mode) {
		access := "mount"
		if block {
			access = "block"
		}
		return false, status.Errorf(codes.InvalidArgument, "access mode %s is not supported for %s access", mode, access)
	}
	return block, s.checkPlatform(c, block)
}

// checkPlatform refuses what the node's operating system cannot do: raw
// block access, mount flags, and the single- and multi-writer access modes
// (which need the publications of a volume listed) where it has none of
// them, as on Windows.
func (s *Service) checkPlatform(c *csi.VolumeCapability, block bool) error {
	p := s.platform
	switch mode := c.GetAccessMode().GetMode(); {
	case block && !p.Block:
		return status.Errorf(codes.InvalidArgument, "raw block volumes are not supported on %s nodes: ask for mount access", p.OS)
	case len(c.GetMount().GetMountFlags()) > 0 && !p.MountFlags:
		return status.Errorf(codes.InvalidArgument, "mount flags %q are not supported on %s nodes: remove the StorageClass's mountOptions",
			c.GetMount().GetMountFlags(), p.OS)
	case !p.PublicationRefs && (mode == csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER ||
		mode == csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER):
		return status.Errorf(codes.InvalidArgument, "access mode %s is not supported on %s nodes (this node does not offer SINGLE_NODE_MULTI_WRITER); use SINGLE_NODE_WRITER", mode, p.OS)
	}
	return nil
}

// filesystemOf returns the filesystem type and format options of a
// mount-access request: the capability's fs_type, else the volume context's
// fsType, else the node's default (ext4 on Linux, ntfs on Windows); a type
// the node's operating system cannot mount is refused. The options are
// validated again here because a volume context can come from a
// hand-written PersistentVolume.
func (s *Service) filesystemOf(c *csi.VolumeCapability, volumeContext map[string]string) (string, volumecontext.FormatOptions, error) {
	requested := c.GetMount().GetFsType()
	if requested == "" {
		for k, v := range volumeContext {
			if strings.EqualFold(k, volumecontext.FSTypeKey) {
				requested = v
			}
		}
	}
	fsType := s.platform.Filesystems[0]
	if strings.TrimSpace(requested) != "" {
		var err error
		if fsType, err = volumecontext.NormalizeFSType(requested); err != nil {
			return "", volumecontext.FormatOptions{}, status.Error(codes.InvalidArgument, err.Error())
		}
	}
	if !slices.Contains(s.platform.Filesystems, fsType) {
		return "", volumecontext.FormatOptions{}, status.Errorf(codes.InvalidArgument,
			"filesystem type %s is not supported on %s nodes: use %s", fsType, s.platform.OS, strings.Join(s.platform.Filesystems, ", "))
	}
	opts, err := volumecontext.ParseFormatOptions(volumeContext, fsType)
	if err != nil {
		return "", volumecontext.FormatOptions{}, status.Errorf(codes.InvalidArgument, "volume context: %v", err)
	}
	return fsType, opts, nil
}

// acquire claims the volume for one operation, or answers Aborted when
// another operation on it is running; the sidecar or kubelet retries.
func (s *Service) acquire(volumeID string) (func(), error) {
	release, ok := s.inFlight.TryAcquire(inflight.Volume(volumeID))
	if !ok {
		return nil, status.Errorf(codes.Aborted, "an operation on volume %s is already in progress", volumeID)
	}
	return release, nil
}

// findDevice finds and verifies the device of a volume, starting where
// the attachment's device name (the publish context's) points.
func (s *Service) findDevice(ctx context.Context, volumeID, devicePath string) (string, error) {
	device, err := s.os.FindDevice(ctx, volumeID, devicePath)
	if err != nil {
		return "", osError(ctx, fmt.Sprintf("find the device of volume %s", volumeID), err)
	}
	return device, nil
}

// osError turns an error from the mounter into a gRPC status, with what
// was being done in front.
func osError(ctx context.Context, doing string, err error) error {
	msg := fmt.Sprintf("%s: %v", doing, err)
	switch {
	case errors.Is(err, mounter.ErrDeviceNotFound):
		return status.Error(codes.NotFound, msg)
	case errors.Is(err, mounter.ErrWrongDevice), errors.Is(err, mounter.ErrFilesystemMismatch):
		return status.Error(codes.FailedPrecondition, msg)
	case errors.Is(err, mounter.ErrHostUnavailable):
		return status.Error(codes.Unavailable, msg)
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	default:
		return status.Error(codes.Internal, msg)
	}
}

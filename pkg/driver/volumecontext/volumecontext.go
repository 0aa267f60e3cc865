// Package volumecontext is the contract between Diskplane's controller and
// node services about what travels with a volume: the keys of the CSI volume
// context (filesystem type and format options, written by CreateVolume) and
// of the publish context (the device name of an attachment, written by
// ControllerPublishVolume), and the parsing and validation of the format
// options.
//
// Both sides validate with the same code: the controller when it creates a
// volume, so a bad StorageClass fails at provisioning with a clear message,
// and the node again before it formats, because a volume context can also
// come from a hand-written PersistentVolume.
package volumecontext

import (
	"fmt"
	"strings"
)

// Publish-context keys, written by ControllerPublishVolume and read by
// NodeStageVolume and NodePublishVolume.
const (
	// DevicePathKey holds the device name EC2 reported for the attachment,
	// e.g. /dev/xvdaa. On Xen instances that is the device node itself (or its
	// /dev/sdX twin); on Nitro instances the volume appears as an NVMe device
	// instead and the node finds it through its by-id link, so the node treats
	// this value as the first place to look, never as the only one.
	DevicePathKey = "devicePath"
)

// ServiceAccountTokensKey is where the kubelet passes the pod's
// service-account tokens to NodePublishVolume when the CSIDriver object asks
// for them (tokenRequests): in the volume context, or, when the CSIDriver
// sets serviceAccountTokenInSecrets (Kubernetes 1.35 and later), in the
// request's secrets. The value is JSON, {"<audience>":{"token":"<JWT>",
// "expirationTimestamp":"<RFC 3339>"}}. It is a credential: nothing may log
// or return it.
const ServiceAccountTokensKey = "csi.storage.k8s.io/serviceAccount.tokens"

// Volume-context keys, written by CreateVolume from the StorageClass
// parameters of the same names and read by NodeStageVolume. Sizes are plain
// decimal numbers of bytes.
const (
	// FSTypeKey names the filesystem to create on first use (ext4, ext3 or
	// xfs on Linux nodes, ntfs on Windows nodes). The volume capability's
	// fs_type, when set, takes precedence.
	FSTypeKey = "fsType"
	// BlockSizeKey is the filesystem block size in bytes (mkfs -b).
	BlockSizeKey = "blockSize"
	// InodeSizeKey is the size of one inode in bytes (mkfs.ext4 -I, mkfs.xfs -i size=).
	InodeSizeKey = "inodeSize"
	// BytesPerInodeKey makes one inode per this many bytes of space (mkfs.ext4 -i).
	BytesPerInodeKey = "bytesPerInode"
	// NumberOfInodesKey is the exact number of inodes to create (mkfs.ext4 -N).
	NumberOfInodesKey = "numberOfInodes"
	// Ext4BigAllocKey turns on ext4 cluster allocation ("true" or "false";
	// mkfs.ext4 -O bigalloc).
	Ext4BigAllocKey = "ext4BigAlloc"
	// Ext4ClusterSizeKey is the ext4 cluster size in bytes when bigalloc is
	// on (mkfs.ext4 -C).
	Ext4ClusterSizeKey = "ext4ClusterSize"
)

// The filesystem types the nodes format and mount: ext3, ext4 and xfs on
// Linux, ntfs on Windows. The controller accepts all of them, since it does
// not know which node will use a volume; each node refuses the ones its
// operating system cannot mount.
const (
	FSTypeExt3 = "ext3"
	FSTypeExt4 = "ext4"
	FSTypeXFS  = "xfs"
	FSTypeNTFS = "ntfs"
	// DefaultFSType is used when neither the capability nor the volume
	// context names a filesystem (on a Linux node; a Windows node's only
	// filesystem is ntfs).
	DefaultFSType = FSTypeExt4
)

// NormalizeFSType returns the filesystem type to use for fsType: the default
// for an empty value, the lower-cased name for a supported one, and an error
// naming the supported types otherwise.
func NormalizeFSType(fsType string) (string, error) {
	switch t := strings.ToLower(strings.TrimSpace(fsType)); t {
	case "":
		return DefaultFSType, nil
	case FSTypeExt3, FSTypeExt4, FSTypeXFS, FSTypeNTFS:
		return t, nil
	default:
		return "", fmt.Errorf("filesystem type %q is not supported: use %s, %s or %s (Linux nodes), or %s (Windows nodes)",
			fsType, FSTypeExt4, FSTypeExt3, FSTypeXFS, FSTypeNTFS)
	}
}

// isExt reports whether fsType is one of the ext family, which share mkfs
// options.
func isExt(fsType string) bool { return fsType == FSTypeExt3 || fsType == FSTypeExt4 }

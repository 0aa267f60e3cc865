// Package csiproxy is the Windows host as Diskplane's node uses it: the
// disk, volume and filesystem operations of csi-proxy, behind one interface
// with two implementations.
//
//   - Pipes: a node plugin in an ordinary Windows container asks csi-proxy,
//     a service on the host, over named pipes, one per API group and version
//     (\\.\pipe\csi-proxy-disk-v1, -volume-v1, -filesystem-v1), with the
//     csi-proxy client/v1.3.0 API groups.
//   - Library: a node plugin in a HostProcess container runs the same
//     operations in-process with the csi-proxy v2 library.
//
// Both only exist for Windows (go-winio's pipes, the library's PowerShell
// and Win32 calls); this file, the interface, is for every build. The
// node's logic (pkg/mounter's Windows implementation) is written once, over
// Host.
package csiproxy

import (
	"context"
	"errors"
)

// MinVersion is the oldest csi-proxy release Diskplane supports: v1.1.1 is
// the first that runs on Windows Server 2022, and v1.1.3 fixes
// CVE-2023-3893 (a pod on the node could make csi-proxy run commands as
// SYSTEM). Connect refuses what it can tell is older (before v1.1.0); a
// v1.1.0 to v1.1.2 looks the same over the pipes as v1.1.3.
const MinVersion = "v1.1.3"

// Host is what a Windows node plugin asks of the host. Disks are numbered
// as Windows numbers them; volumes are Windows volume IDs
// (\\?\Volume{GUID}\); paths are absolute Windows paths with a drive letter
// and backslashes, which csi-proxy insists on.
type Host interface {
	// Check reports whether the host answers: csi-proxy serves every API
	// group over its pipes (it may have stopped since the start); the
	// library in process always does.
	Check(ctx context.Context) error
	// ListDiskIDs returns the serial number (and page 0x83 ID) of every disk
	// by disk number.
	ListDiskIDs(ctx context.Context) (map[uint32]DiskIDs, error)
	// Rescan makes the host look at its disks again, so a disk that grew
	// shows its new size.
	Rescan(ctx context.Context) error
	// DiskSize returns a disk's size in bytes, as last scanned.
	DiskSize(ctx context.Context, disk uint32) (int64, error)
	// SetDiskOnline brings a disk online or takes it offline.
	SetDiskOnline(ctx context.Context, disk uint32, online bool) error
	// ReadDisk reads len(b) bytes of a disk at offset (both multiples of
	// 512). Only a plugin with the host's devices can (HostProcess, or an
	// emulated host); over csi-proxy's pipes it fails with ErrNoDiskAccess.
	ReadDisk(ctx context.Context, disk uint32, offset int64, b []byte) error
	// PartitionDisk initializes a raw disk GPT and creates a basic data
	// partition over it, unless the disk already has a partition other than
	// the Microsoft reserved one: csi-proxy never removes one.
	PartitionDisk(ctx context.Context, disk uint32) error

	// VolumesOnDisk returns the volumes on a disk (none while it is offline).
	VolumesOnDisk(ctx context.Context, disk uint32) ([]string, error)
	// IsVolumeFormatted reports whether Windows finds any filesystem on a
	// volume.
	IsVolumeFormatted(ctx context.Context, volume string) (bool, error)
	// FormatVolume formats a volume NTFS, whatever it holds.
	FormatVolume(ctx context.Context, volume string) error
	// MountVolume makes path, an empty directory, a mount point of volume.
	MountVolume(ctx context.Context, volume, path string) error
	// UnmountVolume flushes volume and removes its mount point at path.
	UnmountVolume(ctx context.Context, volume, path string) error
	// ResizeVolume grows a volume's partition and filesystem as far as its
	// disk allows (csi-proxy skips a growth of less than 100 MiB).
	ResizeVolume(ctx context.Context, volume string) error
	// VolumeStats returns a volume's size and the bytes in use.
	VolumeStats(ctx context.Context, volume string) (total, used int64, err error)
	// DiskOfVolume returns the number of the disk a volume is on.
	DiskOfVolume(ctx context.Context, volume string) (uint32, error)
	// VolumeAt returns the volume mounted at path (through symlinks).
	VolumeAt(ctx context.Context, path string) (string, error)

	// PathExists reports whether path exists.
	PathExists(ctx context.Context, path string) (bool, error)
	// Mkdir creates a directory and its parents.
	Mkdir(ctx context.Context, path string) error
	// Rmdir removes an empty directory, a symlink or a mount point (never
	// what a directory holds).
	Rmdir(ctx context.Context, path string) error
	// CreateSymlink makes target, which must not exist, a directory symlink
	// to source.
	CreateSymlink(ctx context.Context, source, target string) error
	// IsSymlink reports whether path is a symlink or a mount point whose
	// target exists; a path that does not exist is an error.
	IsSymlink(ctx context.Context, path string) (bool, error)

	// Close releases the connections to csi-proxy.
	Close() error
}

// DiskIDs identify a disk.
type DiskIDs struct {
	// SerialNumber is the disk's serial number; for an EBS volume on a Nitro
	// instance, the volume ID without its dash and the NVMe namespace
	// (vol0123456789abcdef0_00000001.).
	SerialNumber string
	// Page83 is the disk's SCSI page 0x83 identifier.
	Page83 string
}

// Errors of a Host.
var (
	// ErrNotServed means csi-proxy does not answer, or does not serve an API
	// group version Diskplane needs.
	ErrNotServed = errors.New("csi-proxy does not serve what Diskplane needs")
	// ErrNoDiskAccess means the plugin cannot read a disk's bytes: csi-proxy
	// has no call for it, and a plugin in an ordinary container has no
	// access to the host's disks.
	ErrNoDiskAccess = errors.New("this plugin cannot read the host's disks")
)

// DiskReader reads a disk's bytes: Windows' \\.\PhysicalDriveN in a
// HostProcess container, the emulated host's in tests.
type DiskReader interface {
	ReadDisk(disk uint32, offset int64, b []byte) error
}

// volumeIDs returns ids without empty ones. csi-proxy's PowerShell code
// (csi-proxy v1.0 to v1.2.1 behind the pipes, the v2 library's
// v2.0.0-alpha.1 in process) splits the output of Get-Volume into lines, so
// a disk with no volume, for which it prints nothing, comes back as one
// volume with an empty ID; to the node that would be a volume to inspect,
// not a disk to partition.
func volumeIDs(ids []string) []string {
	out := ids[:0:0]
	for _, id := range ids {
		if id != "" {
			out = append(out, id)
		}
	}
	return out
}

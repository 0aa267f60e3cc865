// Package mounter is everything the node service asks of the node's
// operating system: finding the device of an attached volume and proving it
// is that volume, formatting it (only when it is blank), mounting, bind
// mounting, unmounting, growing filesystems, and measuring devices and
// filesystems.
//
// The node service reaches the OS only through the Mounter interface, so its
// logic is unit-tested against a fake while this package is tested against
// real loop devices. On Linux it is built on k8s.io/mount-utils and the
// standard tools (blkid, mkfs.*, resize2fs, xfs_growfs); on Windows it asks
// csi-proxy (pkg/csiproxy), which does the privileged work on the host.
// What an operating system cannot do at all (raw block volumes on Windows,
// inode counts) is described by its Platform, which the node service checks
// requests against before it asks the OS anything.
package mounter

import (
	"context"
	"errors"
	"time"

	mountutils "k8s.io/mount-utils"

	"github.com/diskplane/diskplane/pkg/csiproxy"
)

// Mounter is the node's operating system as the node service sees it. Paths
// are absolute. Every method is safe to call again after a failure or a
// crash half way: the node service's idempotency rests on that.
type Mounter interface {
	// Platform describes what this operating system can do with a volume.
	Platform() Platform

	// FindDevice returns the device node of volumeID, symlinks resolved,
	// after verifying that it is that volume. hint is the device name from
	// the publish context (may be empty). It waits briefly, bounded by ctx,
	// for a device that has not appeared yet; it fails with ErrDeviceNotFound
	// when none appears and with ErrWrongDevice when the only devices found
	// belong to another volume.
	FindDevice(ctx context.Context, volumeID, hint string) (string, error)
	// VerifyDevice checks that devicePath (already in use, e.g. mounted) is
	// volumeID. A device that carries no identity at all (a Xen device) is
	// accepted, since it was verified when it was staged.
	VerifyDevice(volumeID, devicePath string) error

	// PathExists reports whether path exists. A corrupted mount point returns
	// an error that IsCorruptedMount recognises.
	PathExists(path string) (bool, error)
	// MakeDir creates a directory and its parents, if missing.
	MakeDir(path string) error
	// MakeFile creates an empty file (for a block volume's bind mount) and
	// its parent directories, if missing.
	MakeFile(path string) error

	// IsMountPoint reports whether path is a mount point (bind mounts
	// included). It returns an error satisfying errors.Is(err,
	// fs.ErrNotExist) when path does not exist.
	IsMountPoint(path string) (bool, error)
	// MountedDevice returns the source of the topmost mount at path, symlinks
	// resolved, or "" when nothing is mounted there.
	MountedDevice(path string) (string, error)
	// MountRefs returns the other mount points that show what path shows:
	// for a mounted directory (a staged filesystem) the bind mounts of it,
	// for a device node every file it is bind-mounted onto. Nothing, when
	// path does not exist. The node service uses it to publish a
	// SINGLE_NODE_SINGLE_WRITER volume at one target path only.
	MountRefs(path string) ([]string, error)
	// MountedReadOnly reports whether the topmost mount at path is
	// read-only for this mount point (a bind mount remounted ro, or a
	// filesystem mounted ro). The node service compares it with a repeated
	// NodePublishVolume's request: a publication that differs in that is
	// not the one asked for. It fails with errors.Is(err, fs.ErrNotExist)
	// when nothing is mounted at path.
	MountedReadOnly(path string) (bool, error)
	// FormatAndMount mounts device, which was found to be volumeID, at
	// target as fsType. A device that holds nothing is formatted first with
	// mkfsArgs added to mkfs's command line, once it has been shown to be
	// volumeID again right before (a device name or disk number can be
	// handed to another volume between finding it and formatting it); a
	// device that holds fsType is mounted as it is; a device holding anything
	// else (another filesystem, a partition table, a LUKS header) is left
	// untouched and the call fails with ErrFilesystemMismatch.
	FormatAndMount(volumeID, device, target, fsType string, mkfsArgs, mountOptions []string) error
	// BindMount bind-mounts source (a directory or a device node) onto
	// target with the given options ("ro" makes the bind read-only).
	BindMount(source, target string, options []string) error
	// Unmount unmounts target once.
	Unmount(target string) error
	// RemountFilesystem makes the filesystem mounted at path read-only or
	// read-write again, for every mount of it at once (the super block's
	// flag): a container's bind mount of it, which a remount of one mount
	// point would not reach, sees the change too. Linux only.
	RemountFilesystem(path string, readOnly bool) error
	// CleanupMountPoint unmounts path if it is mounted (even if the mount is
	// corrupted) and removes it. A missing path is not an error.
	CleanupMountPoint(path string) error

	// NeedResize reports whether the filesystem of device, mounted at
	// mountPath, is smaller than the device.
	NeedResize(device, mountPath string) (bool, error)
	// Resize grows the filesystem of device, mounted at mountPath, to the
	// device's size (resize2fs for ext3/ext4, xfs_growfs for xfs).
	Resize(device, mountPath string) error
	// DeviceSize returns the size in bytes of a block device (or of the
	// device node bind-mounted at path).
	DeviceSize(path string) (int64, error)
	// IsBlockDevice reports whether path is a block device node.
	IsBlockDevice(path string) (bool, error)
	// FilesystemStats measures the filesystem mounted at path.
	FilesystemStats(path string) (Stats, error)
	// InstanceStoreVolumes counts the NVMe instance store volumes of this
	// instance; on most Nitro instance types each takes an EBS attachment slot.
	InstanceStoreVolumes() (int, error)

	// OpenEncrypted makes device, verified to be volumeID, usable through the
	// volume's LUKS mapping, checked against key and spanning the device, and
	// returns the mapping's device node, symlinks resolved. A device holding
	// a LUKS header is opened with key; a device positively read as blank
	// (FormatAndMount's test, and zeros where the mapping's data will begin)
	// is formatted as LUKS2 first. An open mapping of the volume is reused
	// when it sits on device, once key is shown to open a key slot of the
	// header (so a wrong or rotated secret fails now, not at the next
	// reboot), and grown when its device grew; one that sits on another
	// device is refused (ErrWrongDevice). A header labelled as Diskplane's
	// and not yet prepared has its mapping prepared — zeros written where a
	// blank test reads and nothing was ever written — before the label says
	// so, whether the mapping was opened now or found open: a call
	// interrupted at any point is finished by the next one without changing
	// a byte anything wrote. Before any key is derived, every key slot's
	// cost is read and a header beyond the node's bound is refused
	// (ErrLUKSTooCostly). A device holding anything else is refused with
	// ErrFilesystemMismatch and left untouched; a key no key slot takes is
	// ErrWrongPassphrase. The key reaches cryptsetup on its standard input
	// only.
	OpenEncrypted(ctx context.Context, volumeID, device string, key LUKSKey) (string, error)
	// EncryptedMapping returns the device node (symlinks resolved) of the
	// volume's open LUKS mapping and of the device it sits on, or "" and ""
	// when the volume has no open mapping.
	EncryptedMapping(volumeID string) (mapping, device string, err error)
	// ResizeEncrypted grows the volume's open mapping to the size of the
	// device under it; a mapping that spans its device already is left
	// alone. The volume key of an open LUKS2 mapping lives in the kernel's
	// keyring, where a restarted plugin cannot reach it, so growing needs the
	// passphrase; ErrPassphraseNeeded when it must grow and passphrase is
	// empty. A passphrase given is checked against the header whether or not
	// the mapping grows (ErrWrongPassphrase), after the header's cost is
	// (ErrLUKSTooCostly).
	ResizeEncrypted(ctx context.Context, volumeID string, passphrase []byte) error
	// CloseEncrypted closes the volume's LUKS mapping. A mapping that is not
	// open is closed.
	CloseEncrypted(ctx context.Context, volumeID string) error
}

// LUKSKey is what opens a volume's LUKS key slot.
type LUKSKey struct {
	// Secret is the passphrase's or the key's bytes, exactly.
	Secret []byte
	// Random says Secret is a uniformly random key of 256 bits or more (one
	// KMS made), not a passphrase someone chose. Guessing such a key is
	// hopeless whatever its derivation costs, so a header formatted for it
	// derives with PBKDF2 at its minimum cost, and opening takes
	// milliseconds instead of Argon2id's seconds and memory.
	Random bool
}

// Platform is what a node's operating system can do with a volume. The
// node service refuses a request that asks for more with InvalidArgument,
// before anything on the node is touched.
type Platform struct {
	// OS is the operating system as Kubernetes names it, the value of the
	// node's kubernetes.io/os topology key.
	OS string
	// Filesystems are the filesystem types it formats and mounts; the first
	// is the one used when a request names none.
	Filesystems []string
	// Block reports whether a volume can be published as a raw block device.
	Block bool
	// MountFlags reports whether a capability's mount flags can be applied.
	MountFlags bool
	// ReadOnlyPublish reports whether a publication itself is read-only when
	// asked (a read-only bind mount). Where it cannot be (a Windows symlink),
	// the container runtime's read-only mount of the volume is what keeps a
	// pod from writing, and a repeated publication cannot be compared.
	ReadOnlyPublish bool
	// PublicationRefs reports whether MountRefs can list where a volume is
	// published, which a SINGLE_NODE_SINGLE_WRITER volume needs.
	PublicationRefs bool
	// Inodes reports whether FilesystemStats counts inodes.
	Inodes bool
	// Encryption reports whether the node encrypts volumes itself (LUKS2
	// with dm-crypt: OpenEncrypted and the rest).
	Encryption bool
}

// Stats is what NodeGetVolumeStats reports for a filesystem, measured the
// way df measures it.
type Stats struct {
	// TotalBytes is the filesystem's size (df's "size").
	TotalBytes int64
	// AvailableBytes is what unprivileged users may still write (df's "avail").
	AvailableBytes int64
	// UsedBytes is the space in use (df's "used").
	UsedBytes int64
	// TotalInodes is the number of inodes.
	TotalInodes int64
	// FreeInodes is the inodes still free.
	FreeInodes int64
	// UsedInodes is the inodes in use.
	UsedInodes int64
}

// Errors the node service maps to gRPC codes.
var (
	// ErrDeviceNotFound means no device for the volume appeared on this node.
	ErrDeviceNotFound = errors.New("device not found")
	// ErrWrongDevice means a device was found where the volume should be, but
	// it is not the volume (or cannot be shown to be); it is refused.
	ErrWrongDevice = errors.New("device is not the requested volume")
	// ErrFilesystemMismatch means the device holds something other than the
	// requested filesystem; nothing was written to it.
	ErrFilesystemMismatch = errors.New("device holds data the request does not match")
	// ErrWrongPassphrase means the passphrase opens no key slot of the
	// volume's LUKS header; nothing was written to the device.
	ErrWrongPassphrase = errors.New("no key slot of the LUKS header takes this passphrase")
	// ErrLUKSTooCostly means a key slot of the volume's LUKS header takes
	// more memory to derive a key from than the node allows
	// (Options.LUKSMaxPBKDFMemoryKiB); nothing was opened or written.
	ErrLUKSTooCostly = errors.New("a key slot of the LUKS header costs more memory to open than this node allows")
	// ErrPassphraseNeeded means an encrypted volume's mapping must grow and
	// no passphrase was given (NodeExpandVolume without its secret).
	ErrPassphraseNeeded = errors.New("growing the encrypted volume needs its passphrase")
	// ErrEncryptionUnavailable means this node's kernel or tools cannot open
	// LUKS volumes (no device-mapper, or no cryptsetup).
	ErrEncryptionUnavailable = errors.New("this node cannot open LUKS volumes")
	// ErrUnsupported means this operating system cannot do what was asked
	// (the node service's Platform checks keep requests from getting here).
	ErrUnsupported = errors.New("not supported on this operating system")
	// ErrHostUnavailable means the host cannot say now what the request
	// needs (csi-proxy lists no disk while one cannot be opened); nothing
	// was changed, and a retry may succeed.
	ErrHostUnavailable = errors.New("the host cannot answer now")
)

// HostChecker is a Mounter whose host side can stop answering while the
// plugin runs (a Windows node's csi-proxy); the node service's health
// probe asks it.
type HostChecker interface {
	// CheckHost reports whether the host answers.
	CheckHost(ctx context.Context) error
}

// Options configure the mounter.
type Options struct {
	// CSIProxy is how the Windows mounter reaches the host: csi-proxy's
	// pipes or its library in a HostProcess container. Required on Windows,
	// unused on Linux.
	CSIProxy csiproxy.Host
	// StateDir is a directory of the node's own on a Windows host, which
	// csi-proxy may write (below the kubelet's directory): there the node
	// records the disk work it has begun and must finish after an
	// interruption (a partition made and not yet formatted). Required on
	// Windows, unused on Linux.
	StateDir string
	// DeviceLinkDir is where the by-id links of NVMe devices are; tests point
	// it at a private directory.
	DeviceLinkDir string
	// SysDir is where sysfs is mounted.
	SysDir string
	// DeviceWait bounds how long FindDevice waits for a device (a disk, on
	// Windows) to appear.
	DeviceWait time.Duration
	// LUKSPBKDFMemoryKiB is the memory cost of Argon2id, the key derivation
	// of the LUKS2 headers the node writes: what opening the volume takes on
	// any node, for the derivation's length. Zero means DefaultLUKSPBKDFMemoryKiB.
	LUKSPBKDFMemoryKiB int
	// LUKSPBKDFTime is how long cryptsetup tunes the derivation to take on
	// the node that formats (--iter-time). Zero means DefaultLUKSPBKDFTime.
	LUKSPBKDFTime time.Duration
	// LUKSPBKDFIterations, when positive, is Argon2id's time cost (passes)
	// in the LUKS2 headers the node writes, instead of tuning it to take
	// LUKSPBKDFTime on the node that formats: an open then costs the same
	// work on every node of a fleet of mixed sizes, and formatting skips
	// cryptsetup's benchmark. 4 is the least Argon2id takes.
	LUKSPBKDFIterations int
	// LUKSMaxPBKDFMemoryKiB is the most memory an Argon2 key slot of any
	// LUKS header may take for the node to derive a key from it: headers
	// written elsewhere (a restored raw block volume's, say) are refused
	// above it, before cryptsetup could have the plugin's container killed
	// for its memory. Zero means DefaultLUKSMaxPBKDFMemoryKiB, or
	// LUKSPBKDFMemoryKiB when that is larger.
	LUKSMaxPBKDFMemoryKiB int
	// EmulatorLoopDevices accepts a loop device whose backing file is named
	// after the volume (…/vol-….img) as that volume: how the EC2 emulator's
	// loop store attaches volumes to the host it plays. It is for the
	// emulator only: no cloud attaches volumes as loop devices, and a loop
	// device proves nothing about which cloud volume it is, so production
	// discovery leaves it off and accepts only what real clouds present.
	EmulatorLoopDevices bool
}

// Defaults for Options.
const (
	DefaultDeviceLinkDir = "/dev/disk/by-id"
	DefaultSysDir        = "/sys"
	DefaultDeviceWait    = 15 * time.Second
	// DefaultLUKSPBKDFMemoryKiB bounds Argon2id at 32 MiB, which no node
	// plugin's memory limit trips over (cryptsetup's own default scales
	// with the node's memory, and a header written on a large node could
	// then not be opened on a small one).
	DefaultLUKSPBKDFMemoryKiB = 32 * 1024
	// DefaultLUKSPBKDFTime is cryptsetup's own default iteration time.
	DefaultLUKSPBKDFTime = 2 * time.Second
	// DefaultLUKSMaxPBKDFMemoryKiB is 128 MiB: with the plugin's own use,
	// within the chart's 256 MiB memory limit of the node plugin.
	DefaultLUKSMaxPBKDFMemoryKiB = 128 * 1024
)

// IsCorruptedMount reports whether err comes from a mount point whose
// backing is gone (stale file handle, transport endpoint not connected, I/O
// error): such a mount must be unmounted and made again.
func IsCorruptedMount(err error) bool { return mountutils.IsCorruptedMnt(err) }

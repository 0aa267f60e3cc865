package mounter

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/csiproxy"
)

// callTimeout bounds one operation on the host; formatting a large volume
// (a quick NTFS format) is the slowest.
const callTimeout = 2 * time.Minute

// resizeSlack is how much smaller than its disk a volume may be without
// needing to grow: the GPT, the Microsoft reserved partition (16 MiB, or
// 128 MiB on disks initialized by older Windows) and alignment take up to
// about 130 MiB, while an EBS volume grows by whole GiB.
const resizeSlack = 256 << 20

// windowsMounter is the Windows node: the volume of an EBS disk mounted at
// the staging path (a volume mount point), published as a symlink to it,
// all through csi-proxy.
type windowsMounter struct {
	host csiproxy.Host
	wait time.Duration
	// stateDir is the host directory of the node's records
	// (partitionedDir).
	stateDir string
}

// New returns the Mounter of a Windows node over o.CSIProxy.
func New(o Options) (Mounter, error) {
	if o.CSIProxy == nil {
		return nil, errors.New("the Windows node needs csi-proxy (Options.CSIProxy)")
	}
	if o.StateDir == "" {
		return nil, errors.New("the Windows node needs a directory of its own on the host (Options.StateDir)")
	}
	wait := o.DeviceWait
	if wait <= 0 {
		wait = DefaultDeviceWait
	}
	return &windowsMounter{host: o.CSIProxy, wait: wait, stateDir: hostPath(o.StateDir)}, nil
}

func (m *windowsMounter) Platform() Platform { return WindowsPlatform }

// CheckHost reports whether csi-proxy answers (HostChecker).
func (m *windowsMounter) CheckHost(ctx context.Context) error { return m.host.Check(ctx) }

// call is the context of one operation on the host.
func (m *windowsMounter) call() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), callTimeout)
}

// hostPath is a kubelet path (already checked by the node service: a drive
// letter, back or forward slashes) in the form csi-proxy takes: every
// separator a backslash, none at the end but the drive's own. It is the one
// place Windows paths are rewritten.
func hostPath(p string) string {
	p = strings.ReplaceAll(p, "/", `\`)
	if len(p) > 3 {
		p = strings.TrimRight(p, `\`)
	}
	return p
}

func (m *windowsMounter) PathExists(path string) (bool, error) {
	ctx, cancel := m.call()
	defer cancel()
	return m.host.PathExists(ctx, hostPath(path))
}

func (m *windowsMounter) MakeDir(path string) error {
	ctx, cancel := m.call()
	defer cancel()
	return m.host.Mkdir(ctx, hostPath(path))
}

// MakeFile is for the bind mount of a raw block volume, which Windows does
// not have.
func (m *windowsMounter) MakeFile(path string) error {
	return fmt.Errorf("%w: raw block volumes (file %s)", ErrUnsupported, path)
}

// IsMountPoint reports whether path is a volume mount point (a staged
// volume) or a symlink to one (a publication); csi-proxy answers both as
// symlinks.
func (m *windowsMounter) IsMountPoint(path string) (bool, error) {
	ctx, cancel := m.call()
	defer cancel()
	p := hostPath(path)
	exists, err := m.host.PathExists(ctx, p)
	if err != nil {
		return false, err
	}
	if !exists {
		return false, &fs.PathError{Op: "stat", Path: path, Err: fs.ErrNotExist}
	}
	return m.host.IsSymlink(ctx, p)
}

// MountedDevice returns the disk of the volume mounted at path (through a
// publication's symlink), or "" when nothing is mounted there.
func (m *windowsMounter) MountedDevice(path string) (string, error) {
	mounted, err := m.IsMountPoint(path)
	if errors.Is(err, fs.ErrNotExist) || err == nil && !mounted {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	ctx, cancel := m.call()
	defer cancel()
	_, n, err := m.volumeAt(ctx, path)
	if err != nil {
		return "", err
	}
	return diskPath(n), nil
}

// volumeAt returns the volume mounted at path and its disk.
func (m *windowsMounter) volumeAt(ctx context.Context, path string) (string, uint32, error) {
	volume, err := m.host.VolumeAt(ctx, hostPath(path))
	if err != nil {
		return "", 0, fmt.Errorf("find the volume mounted at %s: %w", path, err)
	}
	n, err := m.host.DiskOfVolume(ctx, volume)
	if err != nil {
		return "", 0, fmt.Errorf("find the disk of volume %s: %w", volume, err)
	}
	return volume, n, nil
}

// MountRefs cannot be answered: csi-proxy cannot list the symlinks to a
// path. The Windows Platform offers no access mode that needs it.
func (m *windowsMounter) MountRefs(path string) ([]string, error) {
	return nil, fmt.Errorf("%w: listing the publications of %s", ErrUnsupported, path)
}

// MountedReadOnly is false for every publication: a symlink has no
// read-only state of its own (the container runtime mounts the volume
// read-only into a pod that asks).
func (m *windowsMounter) MountedReadOnly(path string) (bool, error) {
	mounted, err := m.IsMountPoint(path)
	if err == nil && !mounted {
		err = &fs.PathError{Op: "readlink", Path: path, Err: fs.ErrNotExist}
	}
	return false, err
}

// RemountFilesystem is not offered on Windows: csi-proxy has no such call,
// and the volumes that need it (LUKS2 with a key in KMS) are Linux only.
func (m *windowsMounter) RemountFilesystem(path string, _ bool) error {
	return fmt.Errorf("%w: remounting the filesystem at %s", ErrUnsupported, path)
}

// BindMount publishes source at target as a directory symlink. A target
// directory the node service made for it must be empty and is replaced;
// "ro" is the container runtime's to apply, and no other option exists.
func (m *windowsMounter) BindMount(source, target string, options []string) error {
	if i := slices.IndexFunc(options, func(o string) bool { return o != "ro" }); i >= 0 {
		return fmt.Errorf("%w: mount option %q", ErrUnsupported, options[i])
	}
	ctx, cancel := m.call()
	defer cancel()
	t := hostPath(target)
	exists, err := m.host.PathExists(ctx, t)
	if err != nil {
		return err
	}
	if exists {
		// A symlink replaces the path; an empty directory goes first (Rmdir
		// refuses one that is not empty: that would be someone's data).
		if err := m.host.Rmdir(ctx, t); err != nil {
			return fmt.Errorf("make room for the symlink at %s: %w", t, err)
		}
	}
	return m.host.CreateSymlink(ctx, hostPath(source), t)
}

// Unmount removes the mount point of the volume staged at target and takes
// its disk offline, so it is detached cleanly.
func (m *windowsMounter) Unmount(target string) error {
	ctx, cancel := m.call()
	defer cancel()
	volume, n, err := m.volumeAt(ctx, target)
	if err != nil {
		return err
	}
	if err := m.host.UnmountVolume(ctx, volume, hostPath(target)); err != nil {
		return fmt.Errorf("unmount volume %s from %s: %w", volume, target, err)
	}
	if err := m.host.SetDiskOnline(ctx, n, false); err != nil {
		return fmt.Errorf("take disk %d offline: %w", n, err)
	}
	klog.V(4).InfoS("Unmounted volume and took its disk offline", "volume", volume, "disk", n, "path", target)
	return nil
}

// CleanupMountPoint removes a publication (the symlink, or an empty
// directory left by a publication that failed half way). A directory with
// anything in it stays, and fails the call.
func (m *windowsMounter) CleanupMountPoint(path string) error {
	ctx, cancel := m.call()
	defer cancel()
	p := hostPath(path)
	exists, err := m.host.PathExists(ctx, p)
	if err != nil || !exists {
		return err
	}
	return m.host.Rmdir(ctx, p)
}

// NeedResize reports whether the disk, rescanned, is larger than the
// volume mounted at mountPath by more than the partition layout takes.
func (m *windowsMounter) NeedResize(device, mountPath string) (bool, error) {
	n, err := diskNumber(device)
	if err != nil {
		return false, err
	}
	ctx, cancel := m.call()
	defer cancel()
	if err := m.host.Rescan(ctx); err != nil {
		return false, fmt.Errorf("rescan the disks: %w", err)
	}
	size, err := m.host.DiskSize(ctx, n)
	if err != nil {
		return false, err
	}
	volume, _, err := m.volumeAt(ctx, mountPath)
	if err != nil {
		return false, err
	}
	total, _, err := m.host.VolumeStats(ctx, volume)
	if err != nil {
		return false, err
	}
	return size-total > resizeSlack, nil
}

// Resize grows the partition and the NTFS volume mounted at mountPath to
// the disk's size.
func (m *windowsMounter) Resize(_, mountPath string) error {
	ctx, cancel := m.call()
	defer cancel()
	if err := m.host.Rescan(ctx); err != nil {
		return fmt.Errorf("rescan the disks: %w", err)
	}
	volume, _, err := m.volumeAt(ctx, mountPath)
	if err != nil {
		return err
	}
	return m.host.ResizeVolume(ctx, volume)
}

// DeviceSize returns the size of a disk (\\.\PhysicalDriveN).
func (m *windowsMounter) DeviceSize(path string) (int64, error) {
	n, err := diskNumber(path)
	if err != nil {
		return 0, err
	}
	ctx, cancel := m.call()
	defer cancel()
	return m.host.DiskSize(ctx, n)
}

// IsBlockDevice is false: Windows publishes no raw block devices.
func (m *windowsMounter) IsBlockDevice(string) (bool, error) { return false, nil }

// FilesystemStats measures the volume mounted at path, in bytes.
func (m *windowsMounter) FilesystemStats(path string) (Stats, error) {
	ctx, cancel := m.call()
	defer cancel()
	volume, _, err := m.volumeAt(ctx, path)
	if err != nil {
		return Stats{}, err
	}
	total, used, err := m.host.VolumeStats(ctx, volume)
	if err != nil {
		return Stats{}, err
	}
	return Stats{TotalBytes: total, UsedBytes: used, AvailableBytes: total - used}, nil
}

// InstanceStoreVolumes cannot be counted: csi-proxy does not tell an
// instance store disk from another. The node counts those the instance's
// block device mappings list instead.
func (m *windowsMounter) InstanceStoreVolumes() (int, error) {
	return 0, fmt.Errorf("%w: csi-proxy does not tell NVMe instance store disks apart", ErrUnsupported)
}

// OpenEncrypted fails: csi-proxy offers no volume encryption, and the node
// service refuses an encrypted volume on Windows before it gets here.
func (m *windowsMounter) OpenEncrypted(ctx context.Context, volumeID, device string, key LUKSKey) (string, error) {
	return "", fmt.Errorf("%w: volume encryption on the node", ErrUnsupported)
}

// EncryptedMapping finds none: no volume is encrypted on a Windows node.
func (m *windowsMounter) EncryptedMapping(volumeID string) (string, string, error) {
	return "", "", nil
}

// ResizeEncrypted fails: there is no mapping to grow on Windows.
func (m *windowsMounter) ResizeEncrypted(ctx context.Context, volumeID string, passphrase []byte) error {
	return fmt.Errorf("%w: volume encryption on the node", ErrUnsupported)
}

// CloseEncrypted has nothing to close on Windows.
func (m *windowsMounter) CloseEncrypted(ctx context.Context, volumeID string) error { return nil }

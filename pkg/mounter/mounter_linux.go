//go:build linux

package mounter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
	mountutils "k8s.io/mount-utils"
	utilexec "k8s.io/utils/exec"
)

// linuxMounter implements Mounter with k8s.io/mount-utils and the standard
// Linux tools.
type linuxMounter struct {
	mounter mountutils.Interface
	resizer *mountutils.ResizeFs
	exec    utilexec.Interface
	devices *deviceFinder
	luks    luksSettings
}

// luksSettings are the key derivation costs of the LUKS2 headers the node
// writes.
type luksSettings struct {
	memoryKiB int
	time      time.Duration
	// iterations, when positive, fixes Argon2id's passes (no benchmark).
	iterations int
	// maxMemoryKiB bounds the Argon2 memory of every key slot of a header
	// the node derives a key from, whoever wrote it.
	maxMemoryKiB int
}

func (o Options) withDefaults() Options {
	if o.DeviceLinkDir == "" {
		o.DeviceLinkDir = DefaultDeviceLinkDir
	}
	if o.SysDir == "" {
		o.SysDir = DefaultSysDir
	}
	if o.DeviceWait <= 0 {
		o.DeviceWait = DefaultDeviceWait
	}
	if o.LUKSPBKDFMemoryKiB <= 0 {
		o.LUKSPBKDFMemoryKiB = DefaultLUKSPBKDFMemoryKiB
	}
	if o.LUKSPBKDFTime <= 0 {
		o.LUKSPBKDFTime = DefaultLUKSPBKDFTime
	}
	if o.LUKSMaxPBKDFMemoryKiB <= 0 {
		o.LUKSMaxPBKDFMemoryKiB = max(DefaultLUKSMaxPBKDFMemoryKiB, o.LUKSPBKDFMemoryKiB)
	}
	return o
}

// New returns the Mounter of this node.
func New(o Options) (Mounter, error) {
	o = o.withDefaults()
	// Without systemd scopes: those keep FUSE daemons alive across kubelet
	// restarts, which block filesystems do not need, and from inside a
	// container they would reach for the host's systemd.
	m := mountutils.NewWithoutSystemd("")
	ex := utilexec.New()
	return &linuxMounter{
		mounter: m,
		resizer: mountutils.NewResizeFs(ex),
		exec:    ex,
		devices: newDeviceFinder(o),
		luks: luksSettings{memoryKiB: o.LUKSPBKDFMemoryKiB, time: o.LUKSPBKDFTime, iterations: o.LUKSPBKDFIterations,
			maxMemoryKiB: o.LUKSMaxPBKDFMemoryKiB},
	}, nil
}

func (m *linuxMounter) FindDevice(ctx context.Context, volumeID, hint string) (string, error) {
	return m.devices.Find(ctx, volumeID, hint)
}

func (m *linuxMounter) VerifyDevice(volumeID, devicePath string) error {
	return m.devices.Verify(volumeID, devicePath)
}

func (m *linuxMounter) InstanceStoreVolumes() (int, error) {
	return m.devices.InstanceStoreVolumes()
}

func (m *linuxMounter) PathExists(path string) (bool, error) {
	_, err := os.Stat(path)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	default:
		return false, err
	}
}

func (m *linuxMounter) MakeDir(path string) error {
	if err := os.MkdirAll(path, 0o750); err != nil {
		return fmt.Errorf("create directory %s: %w", path, err)
	}
	return nil
}

func (m *linuxMounter) MakeFile(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return fmt.Errorf("create directory for %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDONLY, 0o640)
	if err != nil {
		return fmt.Errorf("create file %s: %w", path, err)
	}
	return f.Close()
}

func (m *linuxMounter) IsMountPoint(path string) (bool, error) {
	return m.mounter.IsMountPoint(path)
}

func (m *linuxMounter) MountedDevice(path string) (string, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", err
	}
	mounts, err := m.mounter.List()
	if err != nil {
		return "", fmt.Errorf("list mounts: %w", err)
	}
	device := ""
	for _, mp := range mounts {
		if mp.Path == real {
			device = mp.Device // later entries are mounted on top of earlier ones
		}
	}
	if device == "" {
		return "", nil
	}
	return m.devices.kernelName(device), nil
}

func (m *linuxMounter) FormatAndMount(volumeID, device, target, fsType string, mkfsArgs, mountOptions []string) error {
	found, err := probe(m.exec, device)
	if err != nil {
		return err
	}
	switch {
	case found.Blank():
		if err := m.format(volumeID, device, fsType, mkfsArgs); err != nil {
			return err
		}
	case found.Filesystem == fsType && found.PartitionTable == "":
		klog.V(4).InfoS("Device already holds the filesystem; mounting it as it is", "device", device, "fsType", fsType)
	default:
		return fmt.Errorf("%w: %s holds %s, not %s; refusing to format or mount it", ErrFilesystemMismatch, device, found, fsType)
	}
	if err := m.mounter.Mount(device, target, fsType, mountOptions); err != nil {
		return fmt.Errorf("mount %s at %s: %w", device, target, err)
	}
	return nil
}

// format makes a filesystem on a device that probe found blank. Right
// before mkfs it shows the device to be volumeID again and probes it again,
// so that the decision to format rests on what was read moments before,
// not on what a device reset or a device name handed to another volume may
// have falsified since. mkfs.xfs is not forced, so it refuses on its own if
// it finds a signature; mkfs.ext* never asks when not run from a terminal,
// so the probes are what protect ext volumes.
func (m *linuxMounter) format(volumeID, device, fsType string, mkfsArgs []string) error {
	if err := m.devices.Verify(volumeID, device); err != nil {
		return fmt.Errorf("check %s is still volume %s before formatting it: %w", device, volumeID, err)
	}
	found, err := probe(m.exec, device)
	if err != nil {
		return err
	}
	if !found.Blank() {
		return fmt.Errorf("%w: %s holds %s on a second look, though it was blank on the first; refusing to format it", ErrFilesystemMismatch, device, found)
	}
	args := append([]string{}, mkfsArgs...)
	if fsType == "ext3" || fsType == "ext4" {
		// No blocks reserved for root: a volume belongs to its pod.
		args = append(args, "-m0")
	}
	args = append(args, device)
	klog.V(2).InfoS("Formatting blank device", "device", device, "fsType", fsType, "args", args)
	out, err := m.exec.Command("mkfs."+fsType, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("mkfs.%s %v: %w: %s", fsType, args, err, out)
	}
	return nil
}

func (m *linuxMounter) BindMount(source, target string, options []string) error {
	opts := append([]string{"bind"}, options...)
	if err := m.mounter.Mount(source, target, "", opts); err != nil {
		return fmt.Errorf("bind mount %s at %s: %w", source, target, err)
	}
	return nil
}

func (m *linuxMounter) RemountFilesystem(path string, readOnly bool) error {
	mode := "rw"
	if readOnly {
		mode = "ro"
	}
	// Without "bind", a remount changes the super block, not this one
	// mount point's flags.
	if out, err := m.exec.Command("mount", "-o", "remount,"+mode, path).CombinedOutput(); err != nil {
		return fmt.Errorf("remount the filesystem at %s %s: %w: %s", path, mode, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (m *linuxMounter) Unmount(target string) error {
	if err := m.mounter.Unmount(target); err != nil {
		return fmt.Errorf("unmount %s: %w", target, err)
	}
	return nil
}

func (m *linuxMounter) CleanupMountPoint(path string) error {
	return mountutils.CleanupMountPoint(path, m.mounter, true)
}

func (m *linuxMounter) Resize(device, mountPath string) error {
	if _, err := m.resizer.Resize(device, mountPath); err != nil {
		return fmt.Errorf("grow filesystem on %s: %w", device, err)
	}
	return nil
}

func (m *linuxMounter) DeviceSize(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	// Seeking to the end of a block device yields its size in bytes.
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, fmt.Errorf("measure %s: %w", path, err)
	}
	return size, nil
}

func (m *linuxMounter) IsBlockDevice(path string) (bool, error) {
	st, err := os.Stat(path)
	if err != nil {
		return false, err
	}
	return st.Mode()&os.ModeDevice != 0 && st.Mode()&os.ModeCharDevice == 0, nil
}

func (m *linuxMounter) FilesystemStats(path string) (Stats, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return Stats{}, fmt.Errorf("statfs %s: %w", path, err)
	}
	unit := st.Frsize
	if unit == 0 {
		unit = st.Bsize
	}
	return Stats{
		TotalBytes:     int64(st.Blocks) * unit,
		AvailableBytes: int64(st.Bavail) * unit,
		UsedBytes:      int64(st.Blocks-st.Bfree) * unit,
		TotalInodes:    int64(st.Files),
		FreeInodes:     int64(st.Ffree),
		UsedInodes:     int64(st.Files - st.Ffree),
	}, nil
}

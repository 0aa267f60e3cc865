//go:build linux

package mounter

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	mountutils "k8s.io/mount-utils"

	"github.com/diskplane/diskplane/pkg/health"
)

// healthChecker inspects volumes through what the kernel already knows: the
// mount table, sysfs, stat and statfs of mount points. Tests point its
// directories at a fake sysfs and mount table and replace stat and statfs.
type healthChecker struct {
	sysDir    string
	devDir    string
	mountInfo string
	// verify proves that a device node is the volume (deviceFinder.verify
	// under the attachment's own name: the device was proven before it
	// was staged).
	verify func(volumeID, dev string) error
	// find looks a volume's device up once, without waiting for it.
	find   func(volumeID string) (string, error)
	stat   func(path string, st *unix.Stat_t) error
	statfs func(path string, st *unix.Statfs_t) error
	// getxattr reads an extended attribute of a path (unix.Getxattr).
	getxattr func(path, name string) error
}

// shutdownProbe is the extended attribute whose lookup on a mount point
// tells whether the filesystem was shut down: ext4 answers every xattr
// lookup of a shut-down filesystem with EIO, and a healthy one says it has
// no such attribute, from the inode in memory.
const shutdownProbe = "user.diskplane.health-probe"

func (m *linuxMounter) VolumeHealth(_ context.Context, volumeID string, paths []string) (health.Report, error) {
	f := m.devices
	h := &healthChecker{
		sysDir: f.sysDir, devDir: f.devDir, mountInfo: mountInfoPath,
		verify: func(volumeID, dev string) error { return f.verify(volumeID, dev, true) },
		find: func(volumeID string) (string, error) {
			return f.findOnce(volumeID, f.candidates(volumeID, ""))
		},
		stat: unix.Stat, statfs: unix.Statfs,
		getxattr: func(path, name string) error {
			_, err := unix.Getxattr(path, name, nil)
			return err
		},
	}
	return h.check(volumeID, paths)
}

// devNum is a device number, major:minor.
type devNum struct{ major, minor uint32 }

func (d devNum) String() string { return fmt.Sprintf("%d:%d", d.major, d.minor) }

// inspection is one health check of one volume: what was found, and which
// devices and filesystems were looked at already (a staging path and the
// pod's bind mount of it show the same ones).
type inspection struct {
	*healthChecker
	volumeID string
	report   health.Report
	mounts   []mountutils.MountInfo
	devices  map[devNum]int64 // checked devices and their size in bytes (-1: unknown)
	supers   map[devNum]bool  // checked filesystems, by their device
}

func (h *healthChecker) check(volumeID string, paths []string) (health.Report, error) {
	mounts, err := mountutils.ParseMountInfo(h.mountInfo)
	if err != nil {
		return health.Report{}, fmt.Errorf("read the mount table: %w", err)
	}
	in := &inspection{healthChecker: h, volumeID: volumeID, mounts: mounts,
		devices: map[devNum]int64{}, supers: map[devNum]bool{}}
	found := false
	for _, p := range paths {
		ok, err := in.path(p)
		if err != nil {
			return health.Report{}, err
		}
		found = found || ok
	}
	if !found {
		ok, err := in.deviceOfVolume()
		if err != nil {
			return health.Report{}, err
		}
		if !ok {
			return health.Report{}, fmt.Errorf("volume %s: %w", volumeID, ErrNotOnNode)
		}
	}
	return in.report, nil
}

// path inspects what is mounted at path; ok is false when nothing is.
func (in *inspection) path(path string) (ok bool, err error) {
	var st unix.Stat_t
	err = in.stat(path, &st)
	switch {
	case errors.Is(err, unix.ENOENT):
		in.report.Note(fmt.Sprintf("%s does not exist", path))
		return false, nil
	case err != nil && IsCorruptedMount(err):
		return in.corruptedMount(path, err)
	case err != nil:
		return false, fmt.Errorf("stat %s: %w", path, err)
	case st.Mode&unix.S_IFMT == unix.S_IFBLK:
		// A raw block volume: the device node bind-mounted onto a file.
		_, err := in.device(devNum{unix.Major(st.Rdev), unix.Minor(st.Rdev)})
		return true, err
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return false, fmt.Errorf("resolve %s: %w", path, err)
	}
	mi, mounted := topMount(in.mounts, real)
	if !mounted {
		in.report.Note(fmt.Sprintf("nothing is mounted at %s", path))
		return false, nil
	}
	return true, in.filesystem(mi, real)
}

// corruptedMount reports a mount point that fails even a stat: a stale
// mount (ENOTCONN, ESTALE) or a filesystem that answers everything with EIO
// (XFS or ext4 shut down after errors, or its device gone); the errors
// ext4 recorded and the device behind it are inspected from sysfs and the
// mount table.
func (in *inspection) corruptedMount(path string, err error) (bool, error) {
	mi, mounted := topMount(in.mounts, filepath.Clean(path))
	if errors.Is(err, unix.EIO) && mounted && blockFilesystem(mi.FsType) {
		in.report.Add(health.Inaccessible, "FilesystemShutDown", fmt.Sprintf("the %s filesystem of volume %s at %s answers "+
			"every access with an I/O error: the kernel shut it down after errors, or its device is gone; delete the pod so that "+
			"the kubelet unmounts it, then repair the filesystem (xfs_repair, e2fsck) before using it again", mi.FsType, in.volumeID, path))
	} else {
		in.report.Add(health.Inaccessible, "MountCorrupted", fmt.Sprintf("the mount of volume %s at %s is corrupted (%v): nothing "+
			"can be read through it; delete the pod so that the kubelet unmounts it and mounts it again", in.volumeID, path, unwrapErrno(err)))
	}
	if !mounted {
		return true, nil
	}
	if strings.HasPrefix(mi.FsType, "ext") {
		// sysfs still answers for a filesystem that answers nothing: what
		// ext4 recorded says why it failed.
		if err := in.ext4Errors(mi); err != nil {
			return true, err
		}
	}
	_, derr := in.device(devNum{uint32(mi.Major), uint32(mi.Minor)})
	return true, derr
}

// deviceOfVolume inspects the volume's device as discovery finds it, and
// the filesystems mounted from it; ok is false when it has none here.
func (in *inspection) deviceOfVolume() (ok bool, err error) {
	dev, err := in.find(in.volumeID)
	if errors.Is(err, ErrDeviceNotFound) || errors.Is(err, ErrWrongDevice) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var st unix.Stat_t
	if err := in.stat(dev, &st); err != nil {
		return false, fmt.Errorf("stat %s: %w", dev, err)
	}
	num := devNum{unix.Major(st.Rdev), unix.Minor(st.Rdev)}
	if _, err := in.device(num); err != nil {
		return false, err
	}
	for _, mi := range in.mounts {
		if uint32(mi.Major) == num.major && uint32(mi.Minor) == num.minor {
			if err := in.filesystem(mi, mi.MountPoint); err != nil {
				return false, err
			}
		}
	}
	return true, nil
}

// blockFilesystem reports whether fsType lives on a block device (the
// filesystems Diskplane formats).
func blockFilesystem(fsType string) bool {
	return slices.Contains([]string{"ext2", "ext3", "ext4", "xfs"}, fsType)
}

// unwrapErrno is the errno inside err, for a short message.
func unwrapErrno(err error) error {
	var errno unix.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}

// filesystem inspects the filesystem of mount mi (seen at path) and the
// device it is on, each once.
func (in *inspection) filesystem(mi mountutils.MountInfo, path string) error {
	num := devNum{uint32(mi.Major), uint32(mi.Minor)}
	if !blockFilesystem(mi.FsType) {
		in.report.Note(fmt.Sprintf("%s holds a %s filesystem, which is not on a block device", path, mi.FsType))
		return nil
	}
	size, err := in.device(num)
	if err != nil || in.supers[num] {
		return err
	}
	in.supers[num] = true
	if slices.Contains(mi.SuperOptions, "emergency_ro") || (slices.Contains(mi.SuperOptions, "ro") && slices.Contains(mi.MountOptions, "rw")) {
		in.report.Add(health.Inaccessible, "FilesystemReadOnly", fmt.Sprintf("the kernel made the %s filesystem of volume %s "+
			"read-only after errors: every write fails; delete the pod so that the kubelet unmounts it, check the device, and "+
			"repair the filesystem (e2fsck -f, xfs_repair) before using it again", mi.FsType, in.volumeID))
	}
	if strings.HasPrefix(mi.FsType, "ext") {
		// Kernels that no longer mark an ext4 filesystem read-only after
		// errors (Linux 6.7, and the stable kernels it was backported to,
		// until emergency_ro shows in 6.15) shut it down instead.
		if err := in.getxattr(path, shutdownProbe); errors.Is(err, unix.EIO) {
			in.report.Add(health.Inaccessible, "FilesystemShutDown", fmt.Sprintf("the kernel shut the %s filesystem of volume %s "+
				"down after errors: every read and write through it fails; delete the pod so that the kubelet unmounts it, "+
				"then run e2fsck -f on the device before using it again", mi.FsType, in.volumeID))
		}
		if err := in.ext4Errors(mi); err != nil {
			return err
		}
	}
	var sfs unix.Statfs_t
	if err := in.statfs(path, &sfs); err != nil {
		if IsCorruptedMount(err) {
			return nil // reported by whoever found it corrupted; nothing to compare
		}
		return fmt.Errorf("statfs %s: %w", path, err)
	}
	unit := sfs.Frsize
	if unit == 0 {
		unit = sfs.Bsize
	}
	if fsBytes := int64(sfs.Blocks) * unit; size > 0 && size < fsBytes {
		in.report.Add(health.Inaccessible, "DeviceSmallerThanFilesystem", fmt.Sprintf("the device of volume %s has %d bytes, "+
			"but its %s filesystem spans at least %d: every read and write beyond the device's end fails with an I/O error",
			in.volumeID, size, mi.FsType, fsBytes))
	}
	return nil
}

// ext4ErrorCodes names the error codes ext4 records (EXT4_ERR_* in the
// kernel's fs/ext4/super.c).
var ext4ErrorCodes = map[int]string{
	1: "an unknown error", 2: "EIO", 3: "ENOMEM", 4: "EFSBADCRC", 5: "EFSCORRUPTED", 6: "ENOSPC", 7: "ENOKEY", 8: "EROFS",
	9: "EFBIG", 10: "EEXIST", 11: "ERANGE", 12: "EOVERFLOW", 13: "EBUSY", 14: "ENOTDIR", 15: "ENOTEMPTY", 16: "ESHUTDOWN", 17: "EFAULT",
}

// Codes of ext4 errors that mean its metadata is damaged.
const (
	ext4ErrBadChecksum = 4
	ext4ErrCorrupted   = 5
)

// ext4Errors reports the errors an ext3/ext4 filesystem recorded in its
// super block (errors_count and the first and last error in
// /sys/fs/ext4/<device>): the count survives remounts until e2fsck clears
// it, so a filesystem that once failed stays reported until it is checked.
func (in *inspection) ext4Errors(mi mountutils.MountInfo) error {
	dir := filepath.Join(in.sysDir, "fs", "ext4", in.kernelName(mi))
	count, err := strconv.Atoi(readTrimmed(filepath.Join(dir, "errors_count")))
	if err != nil || count == 0 {
		return nil // no errors, or a kernel that does not say
	}
	first := ext4Error(dir, "first")
	last := ext4Error(dir, "last")
	kind, reason := health.Degraded, "FilesystemErrors"
	for _, prefix := range []string{"first", "last"} {
		if c, _ := strconv.Atoi(readTrimmed(filepath.Join(dir, prefix+"_error_errcode"))); c == ext4ErrBadChecksum || c == ext4ErrCorrupted {
			kind, reason = health.DataLoss, "FilesystemCorrupted"
		}
	}
	msg := fmt.Sprintf("the %s filesystem of volume %s recorded %d error(s) (first %s", mi.FsType, in.volumeID, count, first)
	if count > 1 {
		msg += "; last " + last
	}
	msg += "): delete the pod so that the kubelet unmounts it, then run e2fsck -f on the device before using it again"
	in.report.Add(kind, reason, msg)
	return nil
}

// kernelName is the name the kernel gives the device of a mount (dm-0 for
// /dev/mapper/…), which names its directory under /sys/fs/ext4; the mount
// table's source when the device is gone.
func (in *inspection) kernelName(mi mountutils.MountInfo) string {
	sys, err := filepath.EvalSymlinks(filepath.Join(in.sysDir, "dev", "block", fmt.Sprintf("%d:%d", mi.Major, mi.Minor)))
	if err != nil {
		return filepath.Base(mi.Source)
	}
	return filepath.Base(sys)
}

// ext4Error describes the first or last error ext4 recorded: what, where
// in the kernel and when.
func ext4Error(dir, which string) string {
	code, _ := strconv.Atoi(readTrimmed(filepath.Join(dir, which+"_error_errcode")))
	what, ok := ext4ErrorCodes[code]
	if !ok {
		what = "an error"
	}
	out := what
	if fn := readTrimmed(filepath.Join(dir, which+"_error_func")); fn != "" {
		out += " in " + fn
	}
	if sec, err := strconv.ParseInt(readTrimmed(filepath.Join(dir, which+"_error_time")), 10, 64); err == nil && sec > 0 {
		out += " at " + time.Unix(sec, 0).UTC().Format(time.RFC3339)
	}
	return out
}

// Device states the kernel reports in <disk>/device/state.
var (
	// scsiStates are the SCSI device states other than running.
	scsiStates = map[string]health.Kind{
		"offline": health.Inaccessible, "transport-offline": health.Inaccessible, "cancel": health.Inaccessible,
		"deleted": health.Inaccessible, "blocked": health.Degraded, "quiesce": health.Degraded, "created": health.Degraded,
	}
	// nvmeStates are the NVMe controller states other than live.
	nvmeStates = map[string]health.Kind{
		"dead": health.Inaccessible, "deleting": health.Inaccessible, "deleting (no IO)": health.Inaccessible,
		"resetting": health.Degraded, "connecting": health.Degraded, "new": health.Degraded,
	}
)

// device inspects the block device num once and returns its size in bytes
// (-1 when it has none to compare a filesystem with). A device-mapper
// device (an encrypted volume) is inspected together with the devices under
// it, where the volume's identity is.
func (in *inspection) device(num devNum) (int64, error) {
	if size, seen := in.devices[num]; seen {
		return size, nil
	}
	in.devices[num] = -1
	sys, err := filepath.EvalSymlinks(filepath.Join(in.sysDir, "dev", "block", num.String()))
	if errors.Is(err, fs.ErrNotExist) {
		in.report.Add(health.Inaccessible, "DeviceGone", fmt.Sprintf("the device of volume %s (%s) is gone from this node "+
			"while still mounted: it was detached or removed, and nothing can be read or written; delete the pod so that "+
			"the kubelet unmounts it, and check that the volume is attached to this node's instance", in.volumeID, num))
		return -1, nil
	}
	if err != nil {
		return -1, fmt.Errorf("sysfs entry of device %s: %w", num, err)
	}
	name := filepath.Base(sys)
	sectors, err := strconv.ParseInt(readTrimmed(filepath.Join(sys, "size")), 10, 64)
	if err != nil {
		return -1, fmt.Errorf("size of device %s: %w", name, err)
	}
	size := sectors * 512
	in.devices[num] = size
	if size == 0 {
		in.report.Add(health.Inaccessible, "DeviceNoCapacity", fmt.Sprintf("device %s of volume %s reports no capacity: its "+
			"storage is gone (a dead NVMe namespace, a volume detached under it) and every read and write fails; delete the pod "+
			"so that the kubelet unmounts it, and check the volume's attachment", name, in.volumeID))
		// Nothing is left to identify: an emptied loop device is backed
		// by nothing, which the identity check would call another volume.
		return size, nil
	}
	if _, err := os.Stat(filepath.Join(sys, "dm")); err == nil {
		return size, in.mappedDevice(sys, name)
	}
	if err := in.verify(in.volumeID, filepath.Join(in.devDir, name)); errors.Is(err, ErrWrongDevice) {
		in.report.Add(health.Inaccessible, "DeviceReplaced", fmt.Sprintf("the device number %s behind volume %s's mount now "+
			"belongs to %s, which is not the volume (%v): the volume's device was removed while mounted and the number reused; "+
			"delete the pod so that the kubelet unmounts it", num, in.volumeID, name, err))
		return size, nil
	} else if err != nil {
		return size, err
	}
	in.deviceState(sys, name)
	in.deviceErrors(sys, name)
	return size, nil
}

// mappedDevice inspects a device-mapper device: suspended, it holds every
// I/O; the devices under it (slaves) are inspected as the volume's.
func (in *inspection) mappedDevice(sys, name string) error {
	if readTrimmed(filepath.Join(sys, "dm", "suspended")) == "1" {
		in.report.Add(health.Degraded, "DeviceSuspended", fmt.Sprintf("device-mapper device %s of volume %s is suspended: "+
			"every read and write waits until it is resumed (dmsetup resume)", name, in.volumeID))
	}
	slaves, err := os.ReadDir(filepath.Join(sys, "slaves"))
	if err != nil {
		return fmt.Errorf("devices under %s: %w", name, err)
	}
	if len(slaves) == 0 {
		in.report.Add(health.Inaccessible, "DeviceGone", fmt.Sprintf("device-mapper device %s of volume %s has no device "+
			"under it any more: the volume's device was removed", name, in.volumeID))
	}
	for _, s := range slaves {
		maj, min, ok := strings.Cut(readTrimmed(filepath.Join(sys, "slaves", s.Name(), "dev")), ":")
		major, err1 := strconv.ParseUint(maj, 10, 32)
		minor, err2 := strconv.ParseUint(min, 10, 32)
		if !ok || err1 != nil || err2 != nil {
			return fmt.Errorf("device number of %s under %s: %q", s.Name(), name, maj+":"+min)
		}
		if _, err := in.device(devNum{uint32(major), uint32(minor)}); err != nil {
			return err
		}
	}
	return nil
}

// deviceState reports a SCSI device or NVMe controller that is not running.
func (in *inspection) deviceState(sys, name string) {
	state := readTrimmed(filepath.Join(sys, "device", "state"))
	states := scsiStates
	if diskKind(name) == kindNVMe {
		states = nvmeStates
	}
	kind, bad := states[state]
	if !bad {
		return
	}
	in.report.Add(kind, "DeviceNotRunning", fmt.Sprintf("device %s of volume %s is %s, not running: reads and writes fail or "+
		"wait until it recovers; if it stays so, check the kernel log (dmesg) and the volume's attachment", name, in.volumeID, state))
}

// deviceErrors reports the I/O errors and timeouts a SCSI device counted
// since it appeared (device/ioerr_cnt and iotmo_cnt). NVMe and virtio
// disks keep no such counters; their errors show in the filesystem's.
func (in *inspection) deviceErrors(sys, name string) {
	count := func(attr string) int64 {
		n, err := strconv.ParseInt(readTrimmed(filepath.Join(sys, "device", attr)), 0, 64)
		if err != nil {
			return 0
		}
		return n
	}
	ioErrors, timeouts := count("ioerr_cnt"), count("iotmo_cnt")
	if ioErrors == 0 && timeouts == 0 {
		return
	}
	in.report.Add(health.Degraded, "DeviceIOErrors", fmt.Sprintf("device %s of volume %s has failed %d I/O request(s) and "+
		"timed out %d since it appeared (kernel counters in sysfs): see the kernel log (dmesg); if they go on, copy the "+
		"data off the volume (snapshot it and restore the snapshot to a new volume)", name, in.volumeID, ioErrors, timeouts))
}

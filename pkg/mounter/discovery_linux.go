//go:build linux

package mounter

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// ebsLinkPrefix starts the udev by-id link name of an EBS volume on a Nitro
// instance; the rest is the volume ID without its dash, as in the NVMe
// serial number.
const ebsLinkPrefix = "nvme-Amazon_Elastic_Block_Store_"

// instanceStoreModel is the NVMe model string of instance store volumes.
const instanceStoreModel = "Amazon EC2 NVMe Instance Storage"

// devicePollInterval is how often FindDevice looks again for a device that
// has not appeared yet.
const devicePollInterval = 250 * time.Millisecond

// deviceFinder finds and verifies the device of a volume. statBlock is the
// one call that needs a real device node; tests replace it.
type deviceFinder struct {
	linkDir   string
	sysDir    string
	devDir    string // where the kernel's device nodes are (/dev)
	wait      time.Duration
	loops     bool // Options.EmulatorLoopDevices
	statBlock func(path string) (major, minor uint32, err error)
}

func newDeviceFinder(o Options) *deviceFinder {
	return &deviceFinder{linkDir: o.DeviceLinkDir, sysDir: o.SysDir, devDir: "/dev", wait: o.DeviceWait,
		loops: o.EmulatorLoopDevices, statBlock: statBlockDevice}
}

// candidate is one place the volume's device may be.
type candidate struct {
	path string
	// named says the path is the device name EC2 gave the attachment, which
	// is the only identity a Xen device has.
	named bool
}

// serialOf returns the NVMe serial number EBS gives volumeID.
func serialOf(volumeID string) string { return strings.Replace(volumeID, "-", "", 1) }

// candidates lists where the volume's device may appear, in the order they
// are tried: the attachment's device name and its Xen twin (/dev/xvdf and
// /dev/sdf name the same device), then the NVMe by-id link.
func (f *deviceFinder) candidates(volumeID, hint string) []candidate {
	var list []candidate
	if hint != "" {
		list = append(list, candidate{path: hint, named: true})
		dir, base := filepath.Split(hint)
		if rest, ok := strings.CutPrefix(base, "xvd"); ok {
			list = append(list, candidate{path: filepath.Join(dir, "sd"+rest), named: true})
		} else if rest, ok := strings.CutPrefix(base, "sd"); ok {
			list = append(list, candidate{path: filepath.Join(dir, "xvd"+rest), named: true})
		}
	}
	return append(list, candidate{path: filepath.Join(f.linkDir, ebsLinkPrefix+serialOf(volumeID))})
}

// Find implements Mounter.FindDevice.
func (f *deviceFinder) Find(ctx context.Context, volumeID, hint string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, f.wait)
	defer cancel()
	cands := f.candidates(volumeID, hint)
	for {
		dev, err := f.findOnce(volumeID, cands)
		if !errors.Is(err, ErrDeviceNotFound) {
			return dev, err
		}
		select {
		case <-ctx.Done():
			return "", err
		case <-time.After(devicePollInterval):
		}
	}
}

// findOnce returns the first candidate that exists and is the volume, or
// else the disk whose serial number names the volume (scanBySerial). When
// candidates exist but none is the volume, and no disk names it, it refuses
// with the reasons, without waiting: a device that belongs to another
// volume does not turn into this one.
func (f *deviceFinder) findOnce(volumeID string, cands []candidate) (string, error) {
	var refusals []error
	for _, c := range cands {
		real, err := filepath.EvalSymlinks(c.path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("resolve %s: %w", c.path, err)
		}
		if err := f.verify(volumeID, real, c.named); err != nil {
			klog.V(2).InfoS("Device is not the volume", "volumeID", volumeID, "path", c.path, "device", real, "err", err)
			refusals = append(refusals, err)
			continue
		}
		klog.V(4).InfoS("Found device", "volumeID", volumeID, "path", c.path, "device", real)
		return real, nil
	}
	if dev := f.scanBySerial(volumeID); dev != "" {
		klog.V(4).InfoS("Found device by its serial number", "volumeID", volumeID, "device", dev)
		return dev, nil
	}
	if len(refusals) > 0 {
		return "", errors.Join(refusals...)
	}
	paths := make([]string, len(cands))
	for i, c := range cands {
		paths[i] = c.path
	}
	return "", fmt.Errorf("%w: volume %s is at none of %s", ErrDeviceNotFound, volumeID, strings.Join(paths, ", "))
}

// scanBySerial looks through the node's disks for one whose serial number
// names volumeID and that verify accepts, and returns its device node, or
// "". It finds the volume where neither the attachment's device name nor a
// by-id link leads to it: on a KVM cloud, whose guest names need not be the
// API's, and on a node without udev's links.
func (f *deviceFinder) scanBySerial(volumeID string) string {
	disks, err := filepath.Glob(filepath.Join(f.sysDir, "block", "*"))
	if err != nil {
		return ""
	}
	for _, d := range disks {
		name := filepath.Base(d)
		if diskKind(name) == "" || serialNames(diskSerial(d), volumeID) == serialOther {
			continue
		}
		dev := filepath.Join(f.devDir, name)
		if err := f.verify(volumeID, dev, false); err != nil {
			klog.V(2).InfoS("Disk with the volume's serial number refused", "volumeID", volumeID, "device", dev, "err", err)
			continue
		}
		return dev
	}
	return ""
}

// Verify implements Mounter.VerifyDevice.
func (f *deviceFinder) Verify(volumeID, devicePath string) error {
	real, err := filepath.EvalSymlinks(devicePath)
	if err != nil {
		return fmt.Errorf("resolve %s: %w", devicePath, err)
	}
	return f.verify(volumeID, real, true)
}

// kernelName is the kernel's own node of the block device at path
// (/dev/dm-3, /dev/nvme1n1), found by its device numbers, so that two
// names of one device compare equal: mount(8) records a LUKS mapping as
// /dev/mapper/<name>, which is udev's link to /dev/dm-N on a host, but a
// device node of its own where libdevmapper made it without udev (the
// node plugin's container). Anything that is not a block device with a
// sysfs entry is path with its symlinks resolved.
func (f *deviceFinder) kernelName(path string) string {
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		resolved = path
	}
	major, minor, err := f.statBlock(resolved)
	if err != nil {
		return resolved
	}
	sysPath, err := filepath.EvalSymlinks(filepath.Join(f.sysDir, "dev", "block", fmt.Sprintf("%d:%d", major, minor)))
	if err != nil {
		return resolved
	}
	return filepath.Join(f.devDir, filepath.Base(sysPath))
}

// verify proves that the block device at dev (symlinks resolved) is
// volumeID, from what the kernel says about it in sysfs:
//   - a disk whose serial number names the volume (see serialNames) is the
//     volume: an NVMe device on Nitro, a virtio-blk or SCSI disk on a KVM
//     cloud that speaks the EC2 API;
//   - a disk whose serial number names something else is not;
//   - a Xen disk (xvd*) has no serial number, and its name is the only
//     identity it has; Xen gives the guest the device name the API
//     reported, so it is accepted under the attachment's own name (named)
//     and refused under any other;
//   - a virtio-blk (vd*) or SCSI (sd*) disk without such a serial number is
//     refused whatever its name: on KVM the guest's names are handed out in
//     the order devices arrive and need not be the names the API reports;
//   - a loop device is the volume when its backing file is named after it
//     (vol-….img, as the EC2 emulator's loop store makes them), and only
//     when Options.EmulatorLoopDevices says so: no cloud attaches loop
//     devices.
//
// Anything else is refused.
func (f *deviceFinder) verify(volumeID, dev string, named bool) error {
	major, minor, err := f.statBlock(dev)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrWrongDevice, dev, err)
	}
	sysPath, err := filepath.EvalSymlinks(filepath.Join(f.sysDir, "dev", "block", fmt.Sprintf("%d:%d", major, minor)))
	if err != nil {
		return fmt.Errorf("%w: no sysfs entry for %s (%d:%d): %w", ErrWrongDevice, dev, major, minor, err)
	}
	if _, err := os.Stat(filepath.Join(sysPath, "partition")); err == nil {
		return fmt.Errorf("%w: %s is a partition, not a whole volume", ErrWrongDevice, dev)
	}
	name := filepath.Base(sysPath)
	if strings.HasPrefix(name, "loop") {
		if !f.loops {
			return fmt.Errorf("%w: %s is a loop device, which no cloud attaches; only the EC2 emulator does, and a node "+
				"plugin that works with it must be started with --emulator-loop-devices", ErrWrongDevice, dev)
		}
		backing := readTrimmed(filepath.Join(sysPath, "loop", "backing_file"))
		base := filepath.Base(backing)
		if backing == "" || (base != volumeID+".img" && base != volumeID) {
			return fmt.Errorf("%w: loop device %s is backed by %q, not by a file of volume %s", ErrWrongDevice, dev, backing, volumeID)
		}
		return nil
	}
	if strings.HasPrefix(name, "dm-") {
		return f.verifyMapping(volumeID, dev, sysPath)
	}
	kind := diskKind(name)
	if kind == "" {
		return fmt.Errorf("%w: cannot tell whether %s (%s) is volume %s", ErrWrongDevice, dev, name, volumeID)
	}
	serial := diskSerial(sysPath)
	switch serialNames(serial, volumeID) {
	case serialExact:
		return nil
	case serialTruncated:
		return f.uniqueSerial(dev, sysPath, serial, volumeID)
	}
	switch {
	case serial != "":
		return fmt.Errorf("%w: %s device %s has serial number %q, not %s", ErrWrongDevice, kind, dev, serial, volumeSerials(volumeID))
	case kind == kindXen && named:
		return nil
	case kind == kindXen:
		return fmt.Errorf("%w: Xen device %s has no serial number, and it is not the attachment's device name, the only identity a Xen device has", ErrWrongDevice, dev)
	default:
		return fmt.Errorf("%w: %s device %s has no serial number naming volume %s, and on a KVM cloud a device name does not prove "+
			"which volume a disk is; the cloud must give the disk the volume ID as its serial number (%s)", ErrWrongDevice, kind, dev, volumeID, volumeSerials(volumeID))
	}
}

// verifyMapping accepts a device-mapper device (at sysPath) only when it is
// the volume's own LUKS mapping, by its name and type, and it sits on one
// device that is the volume.
func (f *deviceFinder) verifyMapping(volumeID, dev, sysPath string) error {
	name := readTrimmed(filepath.Join(sysPath, "dm", "name"))
	uuid := readTrimmed(filepath.Join(sysPath, "dm", "uuid"))
	if name != mappingName(volumeID) || !strings.HasPrefix(uuid, "CRYPT-LUKS") {
		return fmt.Errorf("%w: device-mapper device %s is %q, not the LUKS mapping %s of volume %s", ErrWrongDevice, dev, name, mappingName(volumeID), volumeID)
	}
	slaves, err := os.ReadDir(filepath.Join(sysPath, "slaves"))
	if err != nil || len(slaves) != 1 {
		return fmt.Errorf("%w: LUKS mapping %s does not sit on exactly one device (%v)", ErrWrongDevice, dev, err)
	}
	under := filepath.Join(f.devDir, slaves[0].Name())
	if err := f.verify(volumeID, under, true); err != nil {
		return fmt.Errorf("LUKS mapping %s sits on %s: %w", dev, under, err)
	}
	return nil
}

// Kinds of disk, by the name the kernel gives them.
const (
	kindNVMe   = "NVMe"
	kindXen    = "Xen"
	kindVirtio = "virtio-blk"
	kindSCSI   = "SCSI"
)

// diskKind returns the kind of a disk from its kernel name, "" when it is of
// no kind that can hold an EBS-style volume.
func diskKind(name string) string {
	switch {
	case strings.HasPrefix(name, "nvme"):
		return kindNVMe
	case strings.HasPrefix(name, "xvd"):
		return kindXen
	case strings.HasPrefix(name, "vd"):
		return kindVirtio
	case strings.HasPrefix(name, "sd"):
		return kindSCSI
	default:
		return ""
	}
}

// diskSerial returns the serial number the kernel reports for the disk at
// sysPath, from whichever attribute its driver provides: NVMe controllers
// device/serial, virtio-blk serial, SCSI disks the unit serial number of
// VPD page 0x80 (device/vpd_pg80: a 4-byte header, then the serial). "" when
// it reports none.
func diskSerial(sysPath string) string {
	for _, attr := range []string{"device/serial", "serial"} {
		if s := readTrimmed(filepath.Join(sysPath, attr)); s != "" {
			return s
		}
	}
	page, err := os.ReadFile(filepath.Join(sysPath, "device", "vpd_pg80"))
	if err != nil || len(page) <= 4 || page[1] != 0x80 {
		return ""
	}
	n := min(int(page[2])<<8|int(page[3]), len(page)-4)
	return strings.Trim(string(page[4:4+n]), " \x00\n")
}

// serialMatch is how a serial number names a volume.
type serialMatch int

// How a serial number names a volume.
const (
	serialOther serialMatch = iota
	// serialExact: the volume ID, with or without its dash.
	serialExact
	// serialTruncated: the first serialLimit bytes of the volume ID with its
	// dash, which is what a virtio-blk serial (20 bytes at most) keeps of a
	// 17-digit volume ID. It names every volume whose ID differs only after
	// those bytes, so it is accepted only when no other disk carries it.
	serialTruncated
)

// serialLimit is the longest serial number virtio-blk and NVMe devices hold.
const serialLimit = 20

// serialNames says how serial names volumeID.
func serialNames(serial, volumeID string) serialMatch {
	switch {
	case serial == "":
		return serialOther
	case serial == volumeID || serial == serialOf(volumeID):
		return serialExact
	case len(volumeID) > serialLimit && serial == volumeID[:serialLimit]:
		return serialTruncated
	default:
		return serialOther
	}
}

// volumeSerials lists, for messages, the serial numbers that name volumeID.
func volumeSerials(volumeID string) string {
	forms := []string{volumeID, serialOf(volumeID)}
	if len(volumeID) > serialLimit {
		forms = append(forms, volumeID[:serialLimit])
	}
	return `"` + strings.Join(forms, `" or "`) + `"`
}

// uniqueSerial accepts a disk matched by a truncated serial number only when
// no other disk of the node carries the same one: two volumes whose IDs
// share their first 20 bytes would otherwise be indistinguishable.
func (f *deviceFinder) uniqueSerial(dev, sysPath, serial, volumeID string) error {
	disks, err := filepath.Glob(filepath.Join(f.sysDir, "block", "*"))
	if err != nil {
		return fmt.Errorf("%w: list disks: %w", ErrWrongDevice, err)
	}
	for _, d := range disks {
		other, err := filepath.EvalSymlinks(d)
		if err != nil || other == sysPath {
			continue
		}
		if diskSerial(other) == serial {
			return fmt.Errorf("%w: %s and %s both have serial number %q, the first %d bytes of volume ID %s; "+
				"a truncated serial number cannot tell them apart", ErrWrongDevice, dev, filepath.Base(other), serial, serialLimit, volumeID)
		}
	}
	return nil
}

// InstanceStoreVolumes counts NVMe controllers whose model is EC2 instance
// storage.
func (f *deviceFinder) InstanceStoreVolumes() (int, error) {
	models, err := filepath.Glob(filepath.Join(f.sysDir, "class", "nvme", "*", "model"))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, m := range models {
		if readTrimmed(m) == instanceStoreModel {
			n++
		}
	}
	return n, nil
}

// readTrimmed returns a sysfs attribute without surrounding blanks, or ""
// when it cannot be read.
func readTrimmed(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// statBlockDevice returns the device number of a block device node.
func statBlockDevice(path string) (uint32, uint32, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, 0, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return 0, 0, errors.New("not a block device")
	}
	return unix.Major(st.Rdev), unix.Minor(st.Rdev), nil
}

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
	wait      time.Duration
	statBlock func(path string) (major, minor uint32, err error)
}

func newDeviceFinder(o Options) *deviceFinder {
	return &deviceFinder{linkDir: o.DeviceLinkDir, sysDir: o.SysDir, wait: o.DeviceWait, statBlock: statBlockDevice}
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

// findOnce returns the first candidate that exists and is the volume. When
// candidates exist but none is the volume, it refuses with the reasons,
// without waiting: a device that belongs to another volume does not turn
// into this one.
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
	if len(refusals) > 0 {
		return "", errors.Join(refusals...)
	}
	paths := make([]string, len(cands))
	for i, c := range cands {
		paths[i] = c.path
	}
	return "", fmt.Errorf("%w: volume %s is at none of %s", ErrDeviceNotFound, volumeID, strings.Join(paths, ", "))
}

// Verify implements Mounter.VerifyDevice.
func (f *deviceFinder) Verify(volumeID, devicePath string) error {
	real, err := filepath.EvalSymlinks(devicePath)
	if err != nil {
		return fmt.Errorf("resolve %s: %w", devicePath, err)
	}
	return f.verify(volumeID, real, true)
}

// verify proves that the block device at dev (symlinks resolved) is
// volumeID, from what the kernel says about it in sysfs: an NVMe device's
// serial number is the volume ID without its dash; a loop device's backing
// file is named after the volume (vol-….img, as the EC2 emulator makes
// them). A Xen device (xvd*, sd*, vd*) without a serial number has no
// identity beyond its name, so it is accepted only when named is true, i.e.
// it is the device name of the attachment. Anything else is refused.
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
	switch {
	case strings.HasPrefix(name, "nvme"):
		serial := readTrimmed(filepath.Join(sysPath, "device", "serial"))
		if serial != serialOf(volumeID) {
			return fmt.Errorf("%w: NVMe device %s has serial number %q, not %q", ErrWrongDevice, dev, serial, serialOf(volumeID))
		}
		return nil
	case strings.HasPrefix(name, "loop"):
		backing := readTrimmed(filepath.Join(sysPath, "loop", "backing_file"))
		base := filepath.Base(backing)
		if backing == "" || (base != volumeID+".img" && base != volumeID) {
			return fmt.Errorf("%w: loop device %s is backed by %q, not by a file of volume %s", ErrWrongDevice, dev, backing, volumeID)
		}
		return nil
	case strings.HasPrefix(name, "xvd") || strings.HasPrefix(name, "sd") || strings.HasPrefix(name, "vd"):
		serial := readTrimmed(filepath.Join(sysPath, "device", "serial"))
		if serial == "" {
			serial = readTrimmed(filepath.Join(sysPath, "serial"))
		}
		if strings.HasPrefix(serial, "vol") {
			if serial != serialOf(volumeID) {
				return fmt.Errorf("%w: device %s has serial number %q, not %q", ErrWrongDevice, dev, serial, serialOf(volumeID))
			}
			return nil
		}
		if !named {
			return fmt.Errorf("%w: device %s has no serial number to prove it is volume %s", ErrWrongDevice, dev, volumeID)
		}
		return nil
	default:
		return fmt.Errorf("%w: cannot tell whether %s (%s) is volume %s", ErrWrongDevice, dev, name, volumeID)
	}
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

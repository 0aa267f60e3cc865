package mounter

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"
)

// diskPathPrefix makes a disk number the device path the node service
// passes around: \\.\PhysicalDrive3 is how Windows names disk 3.
const diskPathPrefix = `\\.\PhysicalDrive`

func diskPath(n uint32) string { return diskPathPrefix + strconv.FormatUint(uint64(n), 10) }

// diskNumber reads a disk number back from its device path.
func diskNumber(device string) (uint32, error) {
	n, err := strconv.ParseUint(strings.TrimPrefix(device, diskPathPrefix), 10, 32)
	if err != nil || !strings.HasPrefix(device, diskPathPrefix) {
		return 0, fmt.Errorf("%q is not a Windows disk (%sN)", device, diskPathPrefix)
	}
	return uint32(n), nil
}

// nvmeNamespace is what Windows adds to the serial number of an EBS NVMe
// disk: an underscore, the namespace ID in hex, and a dot
// (vol0123456789abcdef0_00000001.).
var nvmeNamespace = regexp.MustCompile(`_[0-9A-Fa-f]{8}\.?$`)

// serialIsVolume reports whether a disk's serial number names volumeID:
// exactly the volume ID without its dash, with at most the NVMe namespace
// Windows appends. A serial that merely contains the ID (an old 8-digit ID
// is the start of newer 17-digit ones) names another volume.
func serialIsVolume(serial, volumeID string) bool {
	s := nvmeNamespace.ReplaceAllString(strings.TrimSpace(serial), "")
	return strings.EqualFold(s, strings.Replace(volumeID, "-", "", 1))
}

// findDiskPoll is how often FindDevice looks again for a disk that has not
// arrived; every few polls it asks the host to rescan.
const findDiskPoll = 500 * time.Millisecond

// FindDevice returns the disk whose serial number is volumeID, waiting for
// it to arrive. hint (the EC2 device name) means nothing to Windows, whose
// disk numbers come in arrival order.
func (m *windowsMounter) FindDevice(ctx context.Context, volumeID, _ string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, m.wait)
	defer cancel()
	// listErr is why the last list that ended before the wait did failed:
	// csi-proxy fails the whole list while any one disk cannot be opened
	// (one arriving or leaving), which is waited out like a disk that has
	// not arrived. A list cut short by the end of the wait changes nothing.
	var listErr error
	for poll := 0; ; poll++ {
		disks, err := m.disksOf(ctx, volumeID)
		switch {
		case err != nil && ctx.Err() == nil:
			listErr = err
			klog.V(2).InfoS("The host cannot list its disks; waiting", "volumeID", volumeID, "err", err)
		case err != nil:
		case len(disks) == 0:
			listErr = nil
		case len(disks) == 1:
			klog.V(4).InfoS("Found the disk of the volume", "volumeID", volumeID, "disk", disks[0])
			return diskPath(disks[0]), nil
		case len(disks) > 1:
			return "", fmt.Errorf("%w: disks %v all have the serial number of %s; refusing to guess", ErrWrongDevice, disks, volumeID)
		}
		if poll%6 == 5 {
			if err := m.host.Rescan(ctx); err != nil && ctx.Err() == nil {
				klog.V(2).InfoS("Rescan failed while waiting for a disk", "volumeID", volumeID, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			if listErr != nil {
				return "", fmt.Errorf("%w: the disks could not be listed for %s (csi-proxy fails the whole list while any one disk cannot be opened): %v",
					ErrHostUnavailable, m.wait, listErr)
			}
			return "", fmt.Errorf("%w: no disk has the serial number of %s", ErrDeviceNotFound, volumeID)
		case <-time.After(findDiskPoll):
		}
	}
}

// disksOf returns the numbers of the disks whose serial number names
// volumeID.
func (m *windowsMounter) disksOf(ctx context.Context, volumeID string) ([]uint32, error) {
	ids, err := m.host.ListDiskIDs(ctx)
	if err != nil {
		return nil, fmt.Errorf("list disks: %w", err)
	}
	var found []uint32
	for n, id := range ids {
		if serialIsVolume(id.SerialNumber, volumeID) {
			found = append(found, n)
		}
	}
	slices.Sort(found)
	return found, nil
}

// VerifyDevice checks that the disk at devicePath still has the serial
// number of volumeID.
func (m *windowsMounter) VerifyDevice(volumeID, devicePath string) error {
	n, err := diskNumber(devicePath)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrWrongDevice, err)
	}
	ctx, cancel := m.call()
	defer cancel()
	return m.verifyDisk(ctx, volumeID, n)
}

// verifyDisk checks that disk n has the serial number of volumeID now:
// Windows hands a disk's number to the next disk that arrives once it has
// gone, so a number found a moment ago proves nothing by itself.
func (m *windowsMounter) verifyDisk(ctx context.Context, volumeID string, n uint32) error {
	ids, err := m.host.ListDiskIDs(ctx)
	if err != nil {
		return fmt.Errorf("%w: list disks: %v", ErrHostUnavailable, err)
	}
	id, ok := ids[n]
	if !ok || !serialIsVolume(id.SerialNumber, volumeID) {
		return fmt.Errorf("%w: disk %d has serial number %q, not that of %s", ErrWrongDevice, n, id.SerialNumber, volumeID)
	}
	return nil
}

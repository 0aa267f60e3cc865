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
	for poll := 0; ; poll++ {
		disks, err := m.disksOf(ctx, volumeID)
		switch {
		case err != nil:
			return "", err
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
	ids, err := m.host.ListDiskIDs(ctx)
	if err != nil {
		return fmt.Errorf("list disks: %w", err)
	}
	id, ok := ids[n]
	if !ok || !serialIsVolume(id.SerialNumber, volumeID) {
		return fmt.Errorf("%w: disk %d has serial number %q, not that of %s", ErrWrongDevice, n, id.SerialNumber, volumeID)
	}
	return nil
}

// FormatAndMount brings the disk online, makes sure it holds one NTFS
// volume, and mounts that volume at target. It writes a partition table and
// a filesystem only to a disk on which Windows shows no volume at all, and
// formats only the volume that partitioning has just created: a disk with
// one unformatted volume (a BitLocker volume, a filesystem Windows cannot
// read, or a partition a crash left before its format) or more than one
// volume is refused with ErrFilesystemMismatch, untouched. csi-proxy itself
// never removes a partition, and adds one only to a disk with none.
func (m *windowsMounter) FormatAndMount(device, target, fsType string, mkfsArgs, mountOptions []string) error {
	switch {
	case fsType != "ntfs":
		return fmt.Errorf("%w: filesystem %s (Windows nodes format NTFS only)", ErrUnsupported, fsType)
	case len(mkfsArgs) > 0 || len(mountOptions) > 0:
		return fmt.Errorf("%w: format or mount options %q %q", ErrUnsupported, mkfsArgs, mountOptions)
	}
	n, err := diskNumber(device)
	if err != nil {
		return err
	}
	path := hostPath(target)
	ctx, cancel := m.call()
	defer cancel()
	if err := m.host.SetDiskOnline(ctx, n, true); err != nil {
		return fmt.Errorf("bring disk %d online: %w", n, err)
	}
	volume, err := m.ntfsVolume(ctx, n)
	if err != nil {
		return err
	}
	if err := m.host.MountVolume(ctx, volume, path); err != nil {
		return fmt.Errorf("mount volume %s of disk %d at %s: %w", volume, n, path, err)
	}
	return nil
}

// ntfsVolume returns the volume of disk n that holds a filesystem,
// partitioning and formatting a disk that shows no volume.
func (m *windowsMounter) ntfsVolume(ctx context.Context, n uint32) (string, error) {
	volumes, err := m.host.VolumesOnDisk(ctx, n)
	if err != nil {
		return "", fmt.Errorf("list the volumes of disk %d: %w", n, err)
	}
	switch len(volumes) {
	case 0:
		return m.partitionAndFormat(ctx, n)
	case 1:
		formatted, err := m.host.IsVolumeFormatted(ctx, volumes[0])
		if err != nil {
			return "", fmt.Errorf("check the filesystem of volume %s: %w", volumes[0], err)
		}
		if !formatted {
			return "", fmt.Errorf("%w: disk %d has a volume (%s) with no filesystem Windows recognises: it may hold data "+
				"(a locked BitLocker volume, a Linux filesystem) or be a partition whose format a crash interrupted; "+
				"nothing was written. Check it, and clear the disk (Clear-Disk -Number %d -RemoveData) to let Diskplane start over",
				ErrFilesystemMismatch, n, volumes[0], n)
		}
		klog.V(4).InfoS("Disk holds a filesystem; mounting it as it is", "disk", n, "volume", volumes[0])
		return volumes[0], nil
	default:
		return "", fmt.Errorf("%w: disk %d has %d volumes %v; Diskplane uses disks with one, and touches none of these",
			ErrFilesystemMismatch, n, len(volumes), volumes)
	}
}

// partitionAndFormat partitions disk n, which shows no volume, and formats
// the one volume that creates.
func (m *windowsMounter) partitionAndFormat(ctx context.Context, n uint32) (string, error) {
	if err := m.host.PartitionDisk(ctx, n); err != nil {
		return "", fmt.Errorf("partition disk %d: %w", n, err)
	}
	volumes, err := m.host.VolumesOnDisk(ctx, n)
	if err != nil {
		return "", fmt.Errorf("list the volumes of disk %d: %w", n, err)
	}
	if len(volumes) != 1 {
		return "", fmt.Errorf("%w: disk %d showed no volume and still shows %d after partitioning: it has partitions Windows "+
			"does not mount (another system's), which were left as they are", ErrFilesystemMismatch, n, len(volumes))
	}
	formatted, err := m.host.IsVolumeFormatted(ctx, volumes[0])
	if err != nil {
		return "", fmt.Errorf("check the filesystem of volume %s: %w", volumes[0], err)
	}
	if formatted {
		// The new partition lies over an old filesystem, which Windows found.
		klog.InfoS("New partition already holds a filesystem; not formatting it", "disk", n, "volume", volumes[0])
		return volumes[0], nil
	}
	if err := m.host.FormatVolume(ctx, volumes[0]); err != nil {
		return "", fmt.Errorf("format volume %s of disk %d: %w", volumes[0], n, err)
	}
	klog.V(2).InfoS("Partitioned and formatted disk", "disk", n, "volume", volumes[0], "fileSystem", "NTFS")
	return volumes[0], nil
}

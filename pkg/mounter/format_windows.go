package mounter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/csiproxy"
)

// A new volume is made in two calls to the host, PartitionDisk and then
// FormatVolume, with a RAW volume in between: a stage interrupted there (a
// crash, a failed or timed-out format, a volume that appears a moment after
// the partition) would leave a volume that no later stage may format, since
// a RAW volume can also be someone's data (a locked BitLocker volume). So
// before it partitions a disk the node records that it is about to, in a
// directory of its own on the host (Options.StateDir), and removes the
// record once the volume is formatted: a RAW volume on a disk whose record
// is there is the partition Diskplane made and never formatted, and the
// next stage formats it. The record lives on the node, so it is found after
// a restart or a reboot of the node, not on another node or on a copy of
// the disk; those get an error that says what to do.

// partitionedDir holds the records, one directory per volume ID.
const partitionedDir = "partitioned-unformatted"

// New volumes' volumes are looked for this often and this many times after
// PartitionDisk before the stage gives up (and the next finishes it).
const (
	newVolumePoll  = 300 * time.Millisecond
	newVolumeLooks = 20
)

// FormatAndMount brings the disk online, makes sure it holds one NTFS
// volume, and mounts that volume at target. It writes a partition table and
// a filesystem only to a disk on which Windows shows no volume at all and
// that reads as blank where the plugin can read it (HostProcess), and
// formats only the volume of the partition it made itself: this call's, or
// one whose format an interruption kept from completing (see
// partitionedDir). The disk's serial number is checked again right before
// each of those writes. A disk with one unformatted volume that Diskplane
// did not make (a BitLocker volume, a filesystem Windows cannot read) or
// more than one volume is refused with ErrFilesystemMismatch, untouched.
// csi-proxy itself never removes a partition, and adds one only to a disk
// with none.
func (m *windowsMounter) FormatAndMount(volumeID, device, target, fsType string, mkfsArgs, mountOptions []string) error {
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
	volume, err := m.ntfsVolume(ctx, volumeID, n)
	if err != nil {
		return err
	}
	if err := m.host.MountVolume(ctx, volume, path); err != nil {
		// csi-proxy up to v1.2 refuses to mount a volume where it is mounted
		// already (Add-PartitionAccessPath). A stage after a forced
		// re-attach asks that: the mount point stayed while the disk was
		// gone, and reads as none until the disk is back online.
		if at, aerr := m.host.VolumeAt(ctx, path); aerr == nil && sameVolume(at, volume) {
			klog.V(2).InfoS("The volume is mounted at the staging path already", "volumeID", volumeID, "volume", volume, "path", path)
			return nil
		}
		return fmt.Errorf("mount volume %s of disk %d at %s: %w", volume, n, path, err)
	}
	return nil
}

// sameVolume reports whether two Windows volume IDs name one volume:
// csi-proxy's calls spell them with or without the trailing backslash.
func sameVolume(a, b string) bool {
	return strings.EqualFold(strings.TrimSuffix(a, `\`), strings.TrimSuffix(b, `\`))
}

// ntfsVolume returns the volume of disk n that holds a filesystem,
// partitioning and formatting a disk that shows none.
func (m *windowsMounter) ntfsVolume(ctx context.Context, volumeID string, n uint32) (string, error) {
	volumes, err := m.host.VolumesOnDisk(ctx, n)
	if err != nil {
		return "", fmt.Errorf("list the volumes of disk %d: %w", n, err)
	}
	pending, err := m.partitioned(ctx, volumeID)
	if err != nil {
		return "", err
	}
	switch len(volumes) {
	case 0:
		if !pending {
			if err := m.checkBlank(ctx, n); err != nil {
				return "", err
			}
		}
		return m.partitionAndFormat(ctx, volumeID, n)
	case 1:
		formatted, err := m.host.IsVolumeFormatted(ctx, volumes[0])
		if err != nil {
			return "", fmt.Errorf("check the filesystem of volume %s: %w", volumes[0], err)
		}
		if formatted {
			klog.V(4).InfoS("Disk holds a filesystem; mounting it as it is", "disk", n, "volume", volumes[0])
			return volumes[0], m.clearPartitioned(ctx, volumeID)
		}
		if !pending {
			return "", fmt.Errorf("%w: disk %d has a volume (%s) with no filesystem Windows recognises and that this node did not make: "+
				"it may hold data (a locked BitLocker volume, a Linux filesystem), or be the partition of a stage interrupted on another "+
				"node or on the volume a snapshot was taken of; nothing was written. Check it, and if it holds nothing, clear the disk "+
				"(Clear-Disk -Number %d -RemoveData) to let Diskplane start over", ErrFilesystemMismatch, n, volumes[0], n)
		}
		klog.InfoS("Formatting the partition an interrupted stage made", "volumeID", volumeID, "disk", n, "volume", volumes[0])
		return m.format(ctx, volumeID, n, volumes[0])
	default:
		return "", fmt.Errorf("%w: disk %d has %d volumes %v; Diskplane uses disks with one, and touches none of these",
			ErrFilesystemMismatch, n, len(volumes), volumes)
	}
}

// checkBlank refuses a disk that shows no volume to Windows but does not
// read as zeros at both ends: a Linux filesystem or LUKS header written over
// the whole disk, which csi-proxy would partition over. Over csi-proxy's
// pipes the plugin cannot read the disk; Windows showing no volume is then
// all there is to go on (the controller refuses to restore or clone a
// volume made with another filesystem).
func (m *windowsMounter) checkBlank(ctx context.Context, n uint32) error {
	size, err := m.host.DiskSize(ctx, n)
	if err != nil {
		return fmt.Errorf("measure disk %d: %w", n, err)
	}
	window := min(size, 1<<20)
	buf := make([]byte, window)
	for _, off := range []int64{0, size - window} {
		err := m.host.ReadDisk(ctx, n, off, buf)
		if errors.Is(err, csiproxy.ErrNoDiskAccess) {
			klog.V(2).InfoS("Cannot read the disk; taking Windows' word that it holds no volume", "disk", n, "reason", err)
			return nil
		}
		if err != nil {
			return fmt.Errorf("read disk %d to prove it blank: %w", n, err)
		}
		if !allZero(buf) {
			return fmt.Errorf("%w: disk %d shows no volume to Windows but is not blank (its first or last MiB is not zeros): "+
				"it holds data Windows does not recognise, such as a filesystem or LUKS header a Linux node wrote over the whole "+
				"disk; nothing was written", ErrFilesystemMismatch, n)
		}
	}
	return nil
}

// partitionAndFormat partitions disk n, which shows no volume, and formats
// the one volume that creates, recording first that it did.
func (m *windowsMounter) partitionAndFormat(ctx context.Context, volumeID string, n uint32) (string, error) {
	if err := m.markPartitioned(ctx, volumeID); err != nil {
		return "", err
	}
	if err := m.verifyDisk(ctx, volumeID, n); err != nil {
		return "", fmt.Errorf("check disk %d before partitioning it: %w", n, err)
	}
	if err := m.host.PartitionDisk(ctx, n); err != nil {
		return "", fmt.Errorf("partition disk %d: %w", n, err)
	}
	volume, err := m.newVolume(ctx, n)
	if err != nil {
		return "", err
	}
	formatted, err := m.host.IsVolumeFormatted(ctx, volume)
	if err != nil {
		return "", fmt.Errorf("check the filesystem of volume %s: %w", volume, err)
	}
	if formatted {
		// The new partition lies over an old filesystem, which Windows found.
		klog.InfoS("New partition already holds a filesystem; not formatting it", "disk", n, "volume", volume)
		return volume, m.clearPartitioned(ctx, volumeID)
	}
	return m.format(ctx, volumeID, n, volume)
}

// newVolume waits for the one volume of the partition just made on disk n:
// Windows' mount manager announces it a moment after the partition.
func (m *windowsMounter) newVolume(ctx context.Context, n uint32) (string, error) {
	for look := 1; ; look++ {
		volumes, err := m.host.VolumesOnDisk(ctx, n)
		switch {
		case err != nil:
			return "", fmt.Errorf("list the volumes of disk %d: %w", n, err)
		case len(volumes) == 1:
			return volumes[0], nil
		case len(volumes) > 1:
			return "", fmt.Errorf("%w: disk %d showed no volume and shows %d after partitioning; touching none of them", ErrFilesystemMismatch, n, len(volumes))
		case look == newVolumeLooks:
			return "", fmt.Errorf("%w: disk %d still shows no volume %s after partitioning: it has partitions Windows does not mount "+
				"(another system's), which were left as they are, or its volume has not arrived yet; the next stage looks again",
				ErrFilesystemMismatch, n, newVolumePoll*newVolumeLooks)
		}
		if look%3 == 0 {
			if err := m.host.Rescan(ctx); err != nil {
				klog.V(2).InfoS("Rescan failed while waiting for a new volume", "disk", n, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(newVolumePoll):
		}
	}
}

// format formats volume, the unformatted volume of the partition Diskplane
// made on disk n, once it has shown the volume is on disk n and disk n is
// still volumeID, and then removes the record of the partition.
func (m *windowsMounter) format(ctx context.Context, volumeID string, n uint32, volume string) (string, error) {
	on, err := m.host.DiskOfVolume(ctx, volume)
	if err != nil {
		return "", fmt.Errorf("find the disk of volume %s: %w", volume, err)
	}
	if on != n {
		return "", fmt.Errorf("%w: volume %s is on disk %d, not on disk %d of volume %s", ErrWrongDevice, volume, on, n, volumeID)
	}
	if err := m.verifyDisk(ctx, volumeID, n); err != nil {
		return "", fmt.Errorf("check disk %d before formatting volume %s: %w", n, volume, err)
	}
	if err := m.host.FormatVolume(ctx, volume); err != nil {
		return "", fmt.Errorf("format volume %s of disk %d: %w", volume, n, err)
	}
	klog.V(2).InfoS("Formatted the new partition", "volumeID", volumeID, "disk", n, "volume", volume, "fileSystem", "NTFS")
	return volume, m.clearPartitioned(ctx, volumeID)
}

// partitionedRecord is the record of a volume's partition made and not yet
// formatted.
func (m *windowsMounter) partitionedRecord(volumeID string) string {
	return m.stateDir + `\` + partitionedDir + `\` + volumeID
}

// partitioned reports whether the record of volumeID is there.
func (m *windowsMounter) partitioned(ctx context.Context, volumeID string) (bool, error) {
	exists, err := m.host.PathExists(ctx, m.partitionedRecord(volumeID))
	if err != nil {
		return false, fmt.Errorf("look for the record of volume %s's partition: %w", volumeID, err)
	}
	return exists, nil
}

// markPartitioned makes the record of volumeID.
func (m *windowsMounter) markPartitioned(ctx context.Context, volumeID string) error {
	if err := m.host.Mkdir(ctx, m.partitionedRecord(volumeID)); err != nil {
		return fmt.Errorf("record that volume %s is being partitioned (%s): %w", volumeID, m.partitionedRecord(volumeID), err)
	}
	return nil
}

// clearPartitioned removes the record of volumeID, if there is one.
func (m *windowsMounter) clearPartitioned(ctx context.Context, volumeID string) error {
	exists, err := m.partitioned(ctx, volumeID)
	if err != nil || !exists {
		return err
	}
	if err := m.host.Rmdir(ctx, m.partitionedRecord(volumeID)); err != nil {
		return fmt.Errorf("remove the record of volume %s's partition: %w", volumeID, err)
	}
	return nil
}

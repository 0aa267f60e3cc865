package winhost

import (
	"fmt"
	"os"
	"slices"

	"k8s.io/klog/v2"
)

// ListVolumesOnDisk returns the IDs of the volumes on a disk, of one
// partition when partition is not 0. An offline disk shows none.
func (h *Host) ListVolumesOnDisk(number, partition uint32) ([]string, error) {
	var ids []string
	err := h.do("ListVolumesOnDisk", func() (bool, error) {
		d, err := h.disk(number)
		if err != nil || !d.Online {
			return false, err
		}
		for _, p := range d.Partitions {
			if p.Volume != nil && (partition == 0 || p.Number == partition) && !h.stillHidden(p.Volume.ID) {
				ids = append(ids, p.Volume.ID)
			}
		}
		return false, nil
	})
	return ids, err
}

// IsVolumeFormatted reports whether Windows finds a filesystem on the
// volume.
func (h *Host) IsVolumeFormatted(volumeID string) (bool, error) {
	var formatted bool
	err := h.do("IsVolumeFormatted", func() (bool, error) {
		v, _, _, err := h.volume(volumeID)
		if err == nil {
			formatted = v.FileSystem != ""
		}
		return false, err
	})
	return formatted, err
}

// FormatVolume formats a volume NTFS, whatever it held (csi-proxy forces
// the format).
func (h *Host) FormatVolume(volumeID string) error {
	return h.do("FormatVolume", func() (bool, error) {
		v, p, _, err := h.volume(volumeID)
		if err != nil {
			return false, err
		}
		v.FileSystem, v.Used = "NTFS", ntfsMetadata(p.Size)
		v.Formats++
		klog.V(2).InfoS("Formatted volume", "volume", volumeID, "fileSystem", v.FileSystem, "bytes", p.Size, "formats", v.Formats)
		return true, nil
	})
}

// WriteVolumeCache flushes a volume's cache.
func (h *Host) WriteVolumeCache(volumeID string) error {
	return h.do("WriteVolumeCache", func() (bool, error) {
		_, _, _, err := h.volume(volumeID)
		return false, err
	})
}

// MountVolume makes path a mount point of the volume, as
// SetVolumeMountPoint does: path must be an empty directory, or a mount
// point of this volume already (refused too with MountByAccessPath).
func (h *Host) MountVolume(volumeID, path string) error {
	return h.do("MountVolume", func() (bool, error) {
		if _, _, _, err := h.volume(volumeID); err != nil {
			return false, err
		}
		key := canonical(path)
		if current, ok := h.st.Mounts[key]; ok {
			if current == volumeID && h.cfg.MountByAccessPath {
				return false, fmt.Errorf("mount volume %s at %s: %w", volumeID, path, ErrAccessPathInUse)
			}
			if current == volumeID {
				return false, nil
			}
			return false, fmt.Errorf("mount volume %s at %s: the directory is not empty (volume %s is mounted there)", volumeID, path, current)
		}
		if _, ok := h.st.Links[key]; ok {
			return false, fmt.Errorf("mount volume %s at %s: the path is a symbolic link", volumeID, path)
		}
		entries, err := os.ReadDir(h.local(path))
		if err != nil {
			return false, fmt.Errorf("mount volume %s at %s: %w", volumeID, path, err)
		}
		if len(entries) > 0 {
			return false, fmt.Errorf("mount volume %s at %s: the directory is not empty", volumeID, path)
		}
		h.st.Mounts[key] = volumeID
		klog.V(2).InfoS("Mounted volume", "volume", volumeID, "path", path)
		return true, nil
	})
}

// UnmountVolume flushes the volume and removes the mount point at path,
// which stays an empty directory.
func (h *Host) UnmountVolume(volumeID, path string) error {
	return h.do("UnmountVolume", func() (bool, error) {
		if _, _, _, err := h.volume(volumeID); err != nil {
			return false, err
		}
		key := canonical(path)
		if _, ok := h.st.Mounts[key]; !ok {
			return false, fmt.Errorf("unmount volume %s from %s: %w", volumeID, path, ErrNotMountPoint)
		}
		delete(h.st.Mounts, key)
		klog.V(2).InfoS("Unmounted volume", "volume", volumeID, "path", path)
		return true, nil
	})
}

// ResizeVolume grows the volume's partition, and its filesystem, to size
// bytes, or as far as the disk allows for 0. Like csi-proxy it skips a
// growth of less than 100 MiB and a shrink, without an error.
func (h *Host) ResizeVolume(volumeID string, size int64) error {
	return h.do("ResizeVolume", func() (bool, error) {
		v, p, d, err := h.volume(volumeID)
		if err != nil {
			return false, err
		}
		largest := d.maxEnd() - p.Offset
		for _, other := range d.Partitions {
			if other.Offset > p.Offset {
				largest = min(largest, other.Offset-p.Offset)
			}
		}
		final := size
		if final == 0 {
			final = largest
		}
		if final-p.Size < minResize {
			klog.V(2).InfoS("Resize skipped: less than 100 MiB to gain", "volume", volumeID, "bytes", p.Size, "wanted", final)
			return false, nil
		}
		if final > largest {
			return false, fmt.Errorf("resize volume %s to %d bytes: the size is not supported (at most %d)", volumeID, final, largest)
		}
		p.Size = final
		klog.V(2).InfoS("Resized volume", "volume", volumeID, "bytes", p.Size, "fileSystem", v.FileSystem)
		return true, nil
	})
}

// GetVolumeStats returns the volume's size and the bytes in use.
func (h *Host) GetVolumeStats(volumeID string) (total, used int64, err error) {
	err = h.do("GetVolumeStats", func() (bool, error) {
		v, p, _, err := h.volume(volumeID)
		if err == nil {
			total, used = p.Size, v.Used
		}
		return false, err
	})
	return total, used, err
}

// GetDiskNumberFromVolumeID returns the number of the disk the volume is
// on.
func (h *Host) GetDiskNumberFromVolumeID(volumeID string) (uint32, error) {
	var number uint32
	err := h.do("GetDiskNumberFromVolumeID", func() (bool, error) {
		_, _, d, err := h.volume(volumeID)
		if err == nil {
			number = h.st.Numbers[d.VolumeID]
		}
		return false, err
	})
	return number, err
}

// GetVolumeIDFromTargetPath returns the volume mounted at path, following
// symlinks to the mount point as GetVolumePathName does.
func (h *Host) GetVolumeIDFromTargetPath(path string) (string, error) {
	var id string
	err := h.do("GetVolumeIDFromTargetPath", func() (bool, error) {
		exists, err := h.exists(path)
		if err != nil {
			return false, err
		}
		if !exists {
			return false, fmt.Errorf("get the volume of %s: %w", path, os.ErrNotExist)
		}
		resolved, err := h.resolve(path)
		if err != nil {
			return false, err
		}
		v, ok := h.st.Mounts[canonical(resolved)]
		if !ok {
			return false, fmt.Errorf("get the volume of %s: %w", path, ErrNotMountPoint)
		}
		id = v
		return false, nil
	})
	return id, err
}

// GetClosestVolumeIDFromTargetPath returns the volume that holds path: the
// volume mounted at path or at the nearest directory above it (symlinks
// followed), else the volume of the drive.
func (h *Host) GetClosestVolumeIDFromTargetPath(path string) (string, error) {
	var id string
	err := h.do("GetClosestVolumeIDFromTargetPath", func() (bool, error) {
		p := path
		for range 256 {
			if target, ok := h.st.Links[canonical(p)]; ok {
				p = target
				continue
			}
			if v, ok := h.st.Mounts[canonical(p)]; ok {
				id = v
				return false, nil
			}
			parent := parentPath(p)
			if parent == p {
				return false, fmt.Errorf("get the closest volume of %s: no volume is mounted at the drive %s", path, p)
			}
			p = parent
		}
		return false, fmt.Errorf("get the closest volume of %s: too many levels of symbolic links", path)
	})
	return id, err
}

// mountedVolumes lists the mount points of a volume.
func (h *Host) mountedVolumes(volumeID string) []string {
	var paths []string
	for p, v := range h.st.Mounts {
		if v == volumeID {
			paths = append(paths, p)
		}
	}
	slices.Sort(paths)
	return paths
}

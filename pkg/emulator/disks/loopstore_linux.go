package disks

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/klog/v2"
)

// loopStore keeps every volume and snapshot as a sparse image file under its
// data directory and attaches volumes as loop devices with the by-id links a
// Nitro instance would have. It only ever touches loop devices bound to its
// own image files and links that point at loop devices.
type loopStore struct {
	layout
	linkDir string
	locks   keyedMutex
}

// NewLoopStore returns the store that backs volumes with real loop devices:
// images live in dataDir/volumes/<vol-id>.img and dataDir/snapshots/
// <snap-id>.img, and attached volumes get a link in linkDir (DefaultLinkDir
// when empty; tests pass a private directory). It needs root and the loop
// driver (Linux 5.8 or later) and fails at once without them. It removes
// half-written images a crash left behind; call Reconcile next to bring the
// loop devices in line with the model, then RemoveUnknownImages when the
// model's saved state speaks for the data directory.
func NewLoopStore(dataDir, linkDir string) (Store, error) {
	if linkDir == "" {
		linkDir = DefaultLinkDir
	}
	if err := checkLoopSupport(); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, fmt.Errorf("data directory %q: %w", dataDir, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	// The kernel names a loop device's backing file by its resolved path;
	// resolve ours too so the two compare equal.
	if abs, err = filepath.EvalSymlinks(abs); err != nil {
		return nil, fmt.Errorf("resolve data directory: %w", err)
	}
	if linkDir, err = filepath.Abs(linkDir); err != nil {
		return nil, fmt.Errorf("link directory %q: %w", linkDir, err)
	}
	s := &loopStore{layout: newLayout(abs), linkDir: linkDir}
	for _, dir := range []string{s.volumesDir, s.snapshotsDir} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("create %s: %w", dir, err)
		}
		leftovers, _ := filepath.Glob(filepath.Join(dir, tempPrefix+"*"))
		for _, f := range leftovers {
			klog.V(2).InfoS("Removing a half-written image left by a crash", "path", f)
			if err := os.Remove(f); err != nil {
				return nil, fmt.Errorf("remove leftover %s: %w", f, err)
			}
		}
	}
	klog.V(2).InfoS("Loop-device disk store ready", "dataDir", abs, "linkDir", linkDir)
	return s, nil
}

// CreateVolume makes an empty sparse image. An existing image counts as
// created; one smaller than sizeBytes is grown, none is ever shrunk.
func (s *loopStore) CreateVolume(volumeID string, sizeBytes int64) error {
	if err := errors.Join(validateVolumeID(volumeID), validateSize(sizeBytes)); err != nil {
		return err
	}
	defer s.locks.lock(volumeID)()
	path := s.volumePath(volumeID)
	if st, err := os.Stat(path); err == nil {
		if st.Size() < sizeBytes {
			return s.growLocked(volumeID, sizeBytes)
		}
		return nil
	}
	err := writeImageAtomically(path, func(f *os.File) error { return f.Truncate(sizeBytes) })
	if err != nil {
		return fmt.Errorf("create volume %s: %w", volumeID, err)
	}
	klog.V(2).InfoS("Created volume image", "volumeID", volumeID, "sizeBytes", sizeBytes)
	return nil
}

// CreateVolumeFromSnapshot restores a snapshot's bytes into a new image,
// grown to sizeBytes. An existing image counts as restored.
func (s *loopStore) CreateVolumeFromSnapshot(volumeID, snapshotID string, sizeBytes int64) error {
	if err := errors.Join(validateVolumeID(volumeID), validateSnapshotID(snapshotID), validateSize(sizeBytes)); err != nil {
		return err
	}
	defer s.locks.lock(volumeID, snapshotID)()
	if err := s.copyToNewImage(s.volumePath(volumeID), s.snapshotPath(snapshotID), sizeBytes); err != nil {
		return fmt.Errorf("restore snapshot %s to volume %s: %w", snapshotID, volumeID, err)
	}
	return nil
}

// CloneVolume copies a volume's bytes into a new image, grown to sizeBytes.
// An existing image counts as cloned.
func (s *loopStore) CloneVolume(volumeID, sourceVolumeID string, sizeBytes int64) error {
	if err := errors.Join(validateVolumeID(volumeID), validateVolumeID(sourceVolumeID), validateSize(sizeBytes)); err != nil {
		return err
	}
	defer s.locks.lock(volumeID, sourceVolumeID)()
	if err := s.copyToNewImage(s.volumePath(volumeID), s.volumePath(sourceVolumeID), sizeBytes); err != nil {
		return fmt.Errorf("clone volume %s to %s: %w", sourceVolumeID, volumeID, err)
	}
	return nil
}

// ResizeVolume grows a volume's image and the capacity of its loop device if
// it is attached. Asking for the current size again re-applies the device
// capacity, so a call cut short by a crash completes.
func (s *loopStore) ResizeVolume(volumeID string, sizeBytes int64) error {
	if err := errors.Join(validateVolumeID(volumeID), validateSize(sizeBytes)); err != nil {
		return err
	}
	defer s.locks.lock(volumeID)()
	return s.growLocked(volumeID, sizeBytes)
}

// growLocked is ResizeVolume with the volume's lock held.
func (s *loopStore) growLocked(volumeID string, sizeBytes int64) error {
	path := s.volumePath(volumeID)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("resize volume %s: %w", volumeID, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("resize volume %s: %w", volumeID, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("resize volume %s: %w", volumeID, err)
	}
	if sizeBytes < st.Size() {
		return fmt.Errorf("resize volume %s: it has %d bytes and cannot shrink to %d", volumeID, st.Size(), sizeBytes)
	}
	if sizeBytes > st.Size() {
		if err := f.Truncate(sizeBytes); err != nil {
			return fmt.Errorf("grow volume %s: %w", volumeID, err)
		}
		if err := f.Sync(); err != nil {
			return fmt.Errorf("grow volume %s: %w", volumeID, err)
		}
	}
	devs, err := s.activeDevices(path)
	if err != nil {
		return err
	}
	for _, d := range devs {
		cur, err := loopSizeBytes(d.name)
		if err != nil {
			return err
		}
		if cur == sizeBytes {
			continue
		}
		if err := setLoopCapacity(d.name); err != nil {
			return fmt.Errorf("resize volume %s: %w", volumeID, err)
		}
		klog.V(2).InfoS("Grew attached volume", "volumeID", volumeID, "device", d.path(), "fromBytes", cur, "toBytes", sizeBytes)
	}
	return nil
}

// DeleteVolume removes a volume's image. It answers ErrBusy while the volume
// is attached; an image that is gone already counts as deleted.
func (s *loopStore) DeleteVolume(volumeID string) error {
	if err := validateVolumeID(volumeID); err != nil {
		return err
	}
	defer s.locks.lock(volumeID)()
	path := s.volumePath(volumeID)
	devs, err := s.activeDevices(path)
	if err != nil {
		return err
	}
	if len(devs) > 0 {
		return fmt.Errorf("%w: volume %s is still attached as %s", ErrBusy, volumeID, devs[0].path())
	}
	if err := removeImage(path); err != nil {
		return fmt.Errorf("delete volume %s: %w", volumeID, err)
	}
	klog.V(2).InfoS("Deleted volume image", "volumeID", volumeID)
	return nil
}

// CreateSnapshot copies a volume's current image into a snapshot image. Like
// EBS it captures what has reached the volume: data a host still buffers in
// its page cache is not in the snapshot. An existing snapshot counts as
// created.
func (s *loopStore) CreateSnapshot(snapshotID, volumeID string) error {
	if err := errors.Join(validateSnapshotID(snapshotID), validateVolumeID(volumeID)); err != nil {
		return err
	}
	defer s.locks.lock(snapshotID, volumeID)()
	if err := s.copyToNewImage(s.snapshotPath(snapshotID), s.volumePath(volumeID), 0); err != nil {
		return fmt.Errorf("snapshot volume %s to %s: %w", volumeID, snapshotID, err)
	}
	return nil
}

// DeleteSnapshot removes a snapshot's image; one that is gone already counts
// as deleted.
func (s *loopStore) DeleteSnapshot(snapshotID string) error {
	if err := validateSnapshotID(snapshotID); err != nil {
		return err
	}
	defer s.locks.lock(snapshotID)()
	if err := removeImage(s.snapshotPath(snapshotID)); err != nil {
		return fmt.Errorf("delete snapshot %s: %w", snapshotID, err)
	}
	klog.V(2).InfoS("Deleted snapshot image", "snapshotID", snapshotID)
	return nil
}

// copyToNewImage writes dstPath as a copy of srcPath (reflinked when the
// filesystem can, else sparse), grown to sizeBytes when that is larger. It
// does nothing when dstPath exists, and answers ErrNotFound when srcPath
// does not.
func (s *loopStore) copyToNewImage(dstPath, srcPath string, sizeBytes int64) error {
	if _, err := os.Stat(dstPath); err == nil {
		return nil
	}
	src, err := os.Open(srcPath)
	if errors.Is(err, os.ErrNotExist) {
		return ErrNotFound
	}
	if err != nil {
		return err
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return err
	}
	if sizeBytes != 0 && sizeBytes < st.Size() {
		return fmt.Errorf("the source has %d bytes, more than the requested %d", st.Size(), sizeBytes)
	}
	// Flush what the loop device already wrote into the image's page
	// cache, so extent-based copying sees every allocated block.
	if err := src.Sync(); err != nil {
		return fmt.Errorf("flush %s: %w", srcPath, err)
	}
	var method copyMethod
	err = writeImageAtomically(dstPath, func(dst *os.File) error {
		var err error
		if method, err = copyImage(dst, src); err != nil {
			return err
		}
		if sizeBytes > st.Size() {
			return dst.Truncate(sizeBytes)
		}
		return nil
	})
	if err != nil {
		return err
	}
	klog.V(2).InfoS("Copied image", "from", srcPath, "to", dstPath, "method", method, "sizeBytes", max(sizeBytes, st.Size()))
	return nil
}

// writeImageAtomically creates finalPath with the content fill writes: it
// writes a temporary file, syncs it and renames it into place, so a crash
// leaves either no image or a complete one.
func writeImageAtomically(finalPath string, fill func(*os.File) error) error {
	dir := filepath.Dir(finalPath)
	tmp, err := os.CreateTemp(dir, tempPrefix+filepath.Base(finalPath)+"-*")
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if err := fill(tmp); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), finalPath); err != nil {
		return err
	}
	done = true
	return syncDir(dir)
}

// removeImage deletes an image file durably; a missing file is fine.
func removeImage(path string) error {
	if err := clearIOFault(path); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return syncDir(filepath.Dir(path))
}

// syncDir makes a directory's entries (a rename, a removal) durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// activeDevices lists the loop devices bound to an image that are not on
// their way out (a forced detach of a busy device leaves one in autoclear
// until its last user closes it).
func (s *loopStore) activeDevices(imagePath string) ([]loopDevice, error) {
	devs, err := listLoopDevices()
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(devs, func(d loopDevice) bool {
		return d.autoclear || strings.TrimSuffix(d.backingFile, deletedSuffix) != imagePath
	}), nil
}

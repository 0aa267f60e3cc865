package disks

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// fsImmutableFlag is FS_IMMUTABLE_FL of the kernel's linux/fs.h: no write,
// rename, link or removal of the file (chattr +i).
const fsImmutableFlag = 0x00000010

var _ IOFaulter = (*loopStore)(nil)

// FailIO implements IOFaulter. A failing device refuses every write with an
// I/O error ("I/O error, dev loopN" in the kernel log, EIO to the writer),
// as a disk whose storage has gone bad does: its image is marked immutable,
// and the loop driver's writes to it fail. Reads still succeed and the
// image keeps every byte. A filesystem on the device sees its journal
// writes fail, records the error and goes read-only. The data directory
// must be on ext4 (ErrIOFaultsUnsupported otherwise, nothing changed).
func (s *loopStore) FailIO(volumeID string, fail bool) error {
	if err := validateVolumeID(volumeID); err != nil {
		return err
	}
	defer s.locks.lock(volumeID)()
	path := s.volumePath(volumeID)
	devs, err := s.activeDevices(path)
	if err != nil {
		return err
	}
	if len(devs) == 0 {
		return fmt.Errorf("volume %s has no device on this host: %w", volumeID, ErrNotFound)
	}
	if !fail {
		changed, err := setImmutable(path, false)
		if changed {
			klog.InfoS("Volume's device serves writes again", "volumeID", volumeID, "device", devs[0].path())
		}
		return err
	}
	if err := failWrites(path); err != nil {
		return fmt.Errorf("fail the writes of volume %s: %w", volumeID, err)
	}
	klog.InfoS("Volume's device fails every write", "volumeID", volumeID, "device", devs[0].path())
	return nil
}

// failWrites marks the image immutable and proves that its filesystem now
// refuses writes through a descriptor opened before, as the loop driver's
// is: it writes one byte past the image's end through such a descriptor
// (past the end, so that no byte of the volume can change). Where the write
// goes through, it is undone and the answer is ErrIOFaultsUnsupported.
func failWrites(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrPermission) {
		return nil // immutable already
	}
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if _, err := setImmutable(path, true); err != nil {
		return err
	}
	_, werr := f.WriteAt([]byte{0}, st.Size())
	if errors.Is(werr, unix.EPERM) {
		return nil
	}
	_, cerr := setImmutable(path, false)
	if werr == nil {
		werr = ErrIOFaultsUnsupported
		cerr = errors.Join(cerr, f.Truncate(st.Size()))
	}
	return errors.Join(werr, cerr)
}

// clearIOFault lets writes reach an image again; a volume's fault ends with
// its attachment, and an immutable image could not be removed.
// A file that is gone, or on a filesystem without attributes, has none to
// clear.
func clearIOFault(path string) error {
	_, err := setImmutable(path, false)
	if err == nil || errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EOPNOTSUPP) {
		return nil
	}
	return fmt.Errorf("clear the I/O fault of %s: %w", path, err)
}

// setImmutable sets or clears a file's immutable attribute (chattr +i);
// changed is false when it already was so.
func setImmutable(path string, on bool) (changed bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	fd := int(f.Fd())
	flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	if err != nil {
		return false, fmt.Errorf("read the attributes of %s: %w", path, err)
	}
	want := flags &^ fsImmutableFlag
	if on {
		want = flags | fsImmutableFlag
	}
	if want == flags {
		return false, nil
	}
	if err := unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(want)); err != nil {
		return false, fmt.Errorf("set the attributes of %s: %w", path, err)
	}
	return true, nil
}

package disks

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"k8s.io/klog/v2"
)

// Attach binds a loop device to the volume's image (or finds the one already
// bound) and points the volume's by-id link at it. It returns /dev/loopN.
func (s *loopStore) Attach(volumeID string) (string, error) {
	if err := validateVolumeID(volumeID); err != nil {
		return "", err
	}
	defer s.locks.lock(volumeID)()
	return s.attachLocked(volumeID)
}

// attachLocked is Attach with the volume's lock held.
func (s *loopStore) attachLocked(volumeID string) (string, error) {
	path := s.volumePath(volumeID)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("attach volume %s: %w", volumeID, ErrNotFound)
	} else if err != nil {
		return "", fmt.Errorf("attach volume %s: %w", volumeID, err)
	}
	devs, err := s.activeDevices(path)
	if err != nil {
		return "", err
	}
	var devPath string
	if len(devs) > 0 {
		devPath = s.preferredDevice(volumeID, devs).path()
	} else {
		// A new attachment is a new, healthy device (FailIO).
		if err := clearIOFault(path); err != nil {
			return "", fmt.Errorf("attach volume %s: %w", volumeID, err)
		}
		name, err := attachLoop(path)
		if err != nil {
			return "", fmt.Errorf("attach volume %s: %w", volumeID, err)
		}
		devPath = filepath.Join(devDir, name)
		klog.V(2).InfoS("Attached volume", "volumeID", volumeID, "device", devPath)
	}
	if err := writeLink(s.linkDir, volumeID, devPath); err != nil {
		return "", fmt.Errorf("attach volume %s: %w", volumeID, err)
	}
	return devPath, nil
}

// preferredDevice picks, among several devices bound to one volume, the one
// its link already names, else the lowest-numbered.
func (s *loopStore) preferredDevice(volumeID string, devs []loopDevice) loopDevice {
	if target, err := os.Readlink(s.linkPath(volumeID)); err == nil {
		for _, d := range devs {
			if d.path() == target {
				return d
			}
		}
	}
	return devs[0]
}

// Detach removes the volume's link and unbinds its loop device. Without
// force it answers ErrBusy, and changes nothing, while the device is mounted
// or held open. With force a busy device is unbound lazily: the link goes at
// once, but a filesystem still mounted keeps reading and writing the image
// until it is unmounted, when the kernel frees the device (EC2 would fail
// that I/O instead). Attaching the volume again meanwhile binds a second
// device to the same image; writing through both corrupts it, as a forced
// detach on EC2 risks losing data too.
func (s *loopStore) Detach(volumeID string, force bool) error {
	if err := validateVolumeID(volumeID); err != nil {
		return err
	}
	defer s.locks.lock(volumeID)()
	path := s.volumePath(volumeID)
	devs, err := s.activeDevices(path)
	if err != nil {
		return err
	}
	for _, d := range devs {
		lazy, err := detachLoop(d, path, force)
		if err != nil {
			return fmt.Errorf("detach volume %s: %w", volumeID, err)
		}
		if lazy {
			klog.InfoS("Force-detached a busy volume: its loop device goes away when its last user closes it",
				"volumeID", volumeID, "device", d.path())
		} else {
			klog.V(2).InfoS("Detached volume", "volumeID", volumeID, "device", d.path())
		}
	}
	if err := clearIOFault(path); err != nil {
		return fmt.Errorf("detach volume %s: %w", volumeID, err)
	}
	if err := s.removeLink(volumeID); err != nil {
		return fmt.Errorf("detach volume %s: %w", volumeID, err)
	}
	return nil
}

// Reconcile makes the machine match the model after a restart: every volume
// in attachedVolumeIDs gets a loop device and a link (re-created if the
// machine lost them, one device if there were several), and the loop devices
// and links this store made for any other volume are removed — lazily when
// one is still mounted, since the model says it is not attached. Loop devices
// not bound to this store's images and links not pointing at loop devices
// are never touched. It carries on past errors and returns them all.
func (s *loopStore) Reconcile(attachedVolumeIDs []string) error {
	var errs []error
	want := map[string]bool{}
	for _, id := range attachedVolumeIDs {
		if err := validateVolumeID(id); err != nil {
			errs = append(errs, err)
			continue
		}
		want[id] = true
	}
	devs, err := listLoopDevices()
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, d := range devs {
		id, ours := s.volumeIDFromPath(d.backingFile)
		if ours && !d.autoclear && !want[id] {
			errs = append(errs, s.detachStray(id, d))
		}
	}
	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		errs = append(errs, s.reattach(id))
	}
	errs = append(errs, s.removeStrayLinks(want))
	return errors.Join(errs...)
}

// detachStray unbinds a device of a volume the model does not attach here,
// lazily if it is busy, and removes the volume's link.
func (s *loopStore) detachStray(volumeID string, d loopDevice) error {
	defer s.locks.lock(volumeID)()
	path := s.volumePath(volumeID)
	_, err := detachLoop(d, path, false)
	if errors.Is(err, ErrBusy) {
		klog.InfoS("A volume that is not attached still has a busy loop device; detaching it lazily",
			"volumeID", volumeID, "device", d.path(), "reason", err)
		_, err = detachLoop(d, path, true)
	}
	if err != nil {
		return fmt.Errorf("reconcile volume %s: %w", volumeID, err)
	}
	klog.V(2).InfoS("Removed the loop device of a volume that is not attached", "volumeID", volumeID, "device", d.path())
	if err := clearIOFault(path); err != nil {
		return fmt.Errorf("reconcile volume %s: %w", volumeID, err)
	}
	if err := s.removeLink(volumeID); err != nil {
		return fmt.Errorf("reconcile volume %s: %w", volumeID, err)
	}
	return nil
}

// reattach ensures an attached volume has exactly one loop device and its
// link; a duplicate device that is busy is left alone and logged.
func (s *loopStore) reattach(volumeID string) error {
	defer s.locks.lock(volumeID)()
	devPath, err := s.attachLocked(volumeID)
	if err != nil {
		return fmt.Errorf("reconcile volume %s: %w", volumeID, err)
	}
	path := s.volumePath(volumeID)
	devs, err := s.activeDevices(path)
	if err != nil {
		return err
	}
	for _, d := range devs {
		if d.path() == devPath {
			continue
		}
		if _, err := detachLoop(d, path, false); err != nil {
			klog.InfoS("Leaving a second loop device of an attached volume in place", "volumeID", volumeID,
				"device", d.path(), "linked", devPath, "reason", err)
			continue
		}
		klog.V(2).InfoS("Removed a second loop device of an attached volume", "volumeID", volumeID, "device", d.path())
	}
	return nil
}

// removeStrayLinks removes links of volumes the model does not attach here
// when they are this store's: they point at a loop device and name a volume
// this store holds, or point at a device bound to one of its images.
func (s *loopStore) removeStrayLinks(want map[string]bool) error {
	entries, err := os.ReadDir(s.linkDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list links: %w", err)
	}
	var errs []error
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tempPrefix+linkPrefix) {
			// A link writeLink wrote but did not rename before a crash.
			if err := removeLoopLink(filepath.Join(s.linkDir, e.Name())); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		id, ok := volumeIDFromLinkName(e.Name())
		if !ok || want[id] || !s.ownsLink(id) {
			continue
		}
		unlock := s.locks.lock(id)
		err := s.removeLink(id)
		unlock()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		klog.V(2).InfoS("Removed the link of a volume that is not attached", "volumeID", id)
	}
	return errors.Join(errs...)
}

// ownsLink reports whether the volume's link is this store's to manage.
func (s *loopStore) ownsLink(volumeID string) bool {
	target, err := os.Readlink(s.linkPath(volumeID))
	if err != nil {
		return false
	}
	n, isLoop := loopNumberFromPath(target)
	if !isLoop {
		return false
	}
	if _, err := os.Stat(s.volumePath(volumeID)); err == nil {
		return true
	}
	d, bound, err := readLoopDevice("loop" + strconv.Itoa(n))
	if err != nil || !bound {
		return false
	}
	_, ours := s.volumeIDFromPath(d.backingFile)
	return ours
}

// linkPath is where the volume's by-id link lives.
func (s *loopStore) linkPath(volumeID string) string {
	return filepath.Join(s.linkDir, LinkName(volumeID))
}

// removeLink removes the volume's link if it points at a loop device.
func (s *loopStore) removeLink(volumeID string) error {
	return removeLoopLink(s.linkPath(volumeID))
}

// removeLoopLink removes a link if it points at a loop device; a link to
// anything else (a real NVMe device) is not the store's. A missing link is
// fine.
func removeLoopLink(link string) error {
	target, err := os.Readlink(link)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read link %s: %w", link, err)
	}
	if _, isLoop := loopNumberFromPath(target); !isLoop {
		return nil
	}
	if err := os.Remove(link); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove link %s: %w", link, err)
	}
	return nil
}

package disks

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// Expose lets the instance find and open an attached volume's device: the
// cgroup grant first, then the link, so that a node plugin that sees the
// link can open what it names. Exposing what is exposed changes nothing.
func (v View) Expose(volumeID, devPath string) error {
	if err := validateVolumeID(volumeID); err != nil {
		return err
	}
	if v.DevicesCgroup != "" {
		if err := grantDevice(v.DevicesCgroup, devPath); err != nil {
			return fmt.Errorf("expose volume %s: %w", volumeID, err)
		}
	}
	if err := writeLink(v.LinkDir, volumeID, devPath); err != nil {
		return fmt.Errorf("expose volume %s: %w", volumeID, err)
	}
	klog.V(4).InfoS("Exposed volume to an instance", "volumeID", volumeID, "device", devPath, "linkDir", v.LinkDir)
	return nil
}

// Withdraw undoes Expose: the cgroup denies the device first, then the link
// goes, so that a crash in between leaves a link that Reconcile finds and
// withdraws again. A process that already holds the device open (a mounted
// filesystem) keeps it: a cgroup checks opens only, as a forced detach on
// EC2 leaves the guest's mount in place too.
func (v View) Withdraw(volumeID, devPath string) error {
	if err := validateVolumeID(volumeID); err != nil {
		return err
	}
	if v.DevicesCgroup != "" && devPath != "" {
		// A device node or cgroup that is gone leaves nothing to open.
		if err := denyDevice(v.DevicesCgroup, devPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("withdraw volume %s: %w", volumeID, err)
		}
	}
	if err := removeLoopLink(filepath.Join(v.LinkDir, LinkName(volumeID))); err != nil {
		return fmt.Errorf("withdraw volume %s: %w", volumeID, err)
	}
	klog.V(4).InfoS("Withdrew volume from an instance", "volumeID", volumeID, "device", devPath, "linkDir", v.LinkDir)
	return nil
}

// Reconcile brings the view in line with the model after a restart:
// attached maps each volume attached to the instance to its device, which
// is exposed again (device numbers can change across a restart); a link to
// a loop device of any other volume, or one a crash left half written, is
// withdrawn, its device denied first. It carries on past errors.
func (v View) Reconcile(attached map[string]string) error {
	var errs []error
	for id, dev := range attached {
		errs = append(errs, v.Expose(id, dev))
	}
	entries, err := os.ReadDir(v.LinkDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return errors.Join(append(errs, fmt.Errorf("list links: %w", err))...)
	}
	for _, e := range entries {
		link := filepath.Join(v.LinkDir, e.Name())
		id, isVolume := volumeIDFromLinkName(e.Name())
		temp := strings.HasPrefix(e.Name(), tempPrefix+linkPrefix)
		if !temp && (!isVolume || attached[id] != "") {
			continue
		}
		target, err := os.Readlink(link)
		if err != nil {
			continue
		}
		if _, isLoop := loopNumberFromPath(target); !isLoop {
			continue
		}
		if v.DevicesCgroup != "" {
			if err := denyDevice(v.DevicesCgroup, target); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
				continue
			}
		}
		errs = append(errs, removeLoopLink(link))
		klog.V(2).InfoS("Withdrew a volume the instance no longer has", "link", link, "device", target)
	}
	return errors.Join(errs...)
}

// writeLink points the volume's link in dir at devPath, replacing whatever
// link was there in one rename so readers never see it missing.
func writeLink(dir, volumeID, devPath string) error {
	link := filepath.Join(dir, LinkName(volumeID))
	if cur, err := os.Readlink(link); err == nil && cur == devPath {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create link directory: %w", err)
	}
	tmp := filepath.Join(dir, tempPrefix+LinkName(volumeID)+"-"+fmt.Sprint(os.Getpid()))
	_ = os.Remove(tmp)
	if err := os.Symlink(devPath, tmp); err != nil {
		return fmt.Errorf("create link: %w", err)
	}
	if err := os.Rename(tmp, link); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("create link: %w", err)
	}
	klog.V(4).InfoS("Linked volume", "link", link, "device", devPath)
	return nil
}

// deviceRule is a cgroup v1 devices rule for one block device with the
// given access ("rwm", "rw").
func deviceRule(devPath, access string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(devPath, &st); err != nil {
		return "", fmt.Errorf("device %s: %w", devPath, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return "", fmt.Errorf("device %s is not a block device", devPath)
	}
	return fmt.Sprintf("b %d:%d %s", unix.Major(st.Rdev), unix.Minor(st.Rdev), access), nil
}

// grantDevice allows the device in a devices cgroup and in every cgroup
// below it that allows by default (privileged containers, pod and QoS
// cgroups), parents first as the kernel requires. A v1 cgroup copies its
// parent's denials when it is made and an allow is never passed down, so a
// node plugin started before the attach would otherwise never see the
// device. Cgroups that deny by default (ordinary containers) are left
// alone: they get only the devices their runtime lists.
func grantDevice(root, devPath string) error {
	rule, err := deviceRule(devPath, "rwm")
	if err != nil {
		return err
	}
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path != root && errors.Is(err, fs.ErrNotExist) {
				return nil // a container that went meanwhile
			}
			return fmt.Errorf("devices cgroup: %w", err)
		}
		if !d.IsDir() {
			return nil
		}
		if path != root {
			allows, err := allowsByDefault(path)
			if errors.Is(err, fs.ErrNotExist) {
				return fs.SkipDir
			}
			if err != nil {
				return err
			}
			if !allows {
				return fs.SkipDir
			}
		}
		return writeDeviceRule(filepath.Join(path, "devices.allow"), rule, path != root)
	})
}

// denyDevice denies reading and writing the device in a devices cgroup;
// the kernel passes a denial down to every cgroup below it. Making a device
// node stays allowed: runc gives every ordinary container "b *:* m", which
// the kernel refuses under a parent that denies m for any block device, so
// such a cgroup would start no container at all.
func denyDevice(root, devPath string) error {
	rule, err := deviceRule(devPath, "rw")
	if err != nil {
		return err
	}
	return writeDeviceRule(filepath.Join(root, "devices.deny"), rule, false)
}

// writeDeviceRule writes one rule; when gone is tolerated, a cgroup removed
// meanwhile is not an error.
func writeDeviceRule(file, rule string, goneOK bool) error {
	err := os.WriteFile(file, []byte(rule), 0)
	if err != nil && !(goneOK && errors.Is(err, fs.ErrNotExist)) {
		return fmt.Errorf("write %q to %s: %w", rule, file, err)
	}
	return nil
}

// allowsByDefault reports whether a v1 devices cgroup allows every device
// but its exceptions: devices.list then shows the single rule "a *:* rwm"
// (the exceptions are not listed).
func allowsByDefault(cgroup string) (bool, error) {
	f, err := os.Open(filepath.Join(cgroup, "devices.list"))
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return false, sc.Err()
	}
	return strings.TrimSpace(sc.Text()) == "a *:* rwm", nil
}

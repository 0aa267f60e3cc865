//go:build linux

package mounter

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"
	mountutils "k8s.io/mount-utils"
)

// mountInfoPath is where the kernel lists this process's mounts.
const mountInfoPath = "/proc/self/mountinfo"

// MountRefs reads the mount table itself rather than using mount-utils'
// GetMountRefs, which finds the mount holding a path by the order of the
// table and so, where a parent is listed after its child (as in many
// containers, where / comes after /dev), misses every bind mount of a
// device node.
func (m *linuxMounter) MountRefs(path string) ([]string, error) {
	real, err := filepath.EvalSymlinks(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Stat(real, &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", real, err)
	}
	mounts, err := mountutils.ParseMountInfo(mountInfoPath)
	if err != nil {
		return nil, fmt.Errorf("read the mount table: %w", err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFBLK {
		return deviceNodeRefs(mounts, st), nil
	}
	return filesystemRefs(mounts, real), nil
}

func (m *linuxMounter) MountedReadOnly(path string) (bool, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return false, err
	}
	mounts, err := mountutils.ParseMountInfo(mountInfoPath)
	if err != nil {
		return false, fmt.Errorf("read the mount table: %w", err)
	}
	return mountedReadOnly(mounts, real)
}

// mountedReadOnly reads the per-mount options of the topmost mount at
// mountPoint: a bind mount's "ro" is there, whatever the filesystem's own
// (super block) options say.
func mountedReadOnly(mounts []mountutils.MountInfo, mountPoint string) (bool, error) {
	top, ok := topMount(mounts, mountPoint)
	if !ok {
		return false, fmt.Errorf("nothing is mounted at %s: %w", mountPoint, fs.ErrNotExist)
	}
	return slices.Contains(top.MountOptions, "ro"), nil
}

// topMount is the mount at mountPoint that the path shows: the table lists
// mounts in the order they were made, so the last one is on top.
func topMount(mounts []mountutils.MountInfo, mountPoint string) (mountutils.MountInfo, bool) {
	for i := len(mounts) - 1; i >= 0; i-- {
		if mounts[i].MountPoint == mountPoint {
			return mounts[i], true
		}
	}
	return mountutils.MountInfo{}, false
}

// filesystemRefs lists the other mounts of what is mounted at mountPoint:
// the same filesystem (device numbers) and the same directory of it (root).
// A path nothing is mounted at has none.
func filesystemRefs(mounts []mountutils.MountInfo, mountPoint string) []string {
	top, ok := topMount(mounts, mountPoint)
	if !ok {
		return nil
	}
	var refs []string
	for _, mi := range mounts {
		if mi.ID != top.ID && mi.Major == top.Major && mi.Minor == top.Minor && mi.Root == top.Root {
			refs = append(refs, mi.MountPoint)
		}
	}
	return refs
}

// deviceNodeRefs lists the files a device node is bind-mounted onto: mounts
// of a single file of the filesystem holding the node (/dev) that are a
// block device with the same device number. Only mounts of that filesystem
// are looked at, so no other mount (a network one that might hang) is
// touched.
func deviceNodeRefs(mounts []mountutils.MountInfo, node unix.Stat_t) []string {
	var refs []string
	for _, mi := range mounts {
		if mi.Root == "/" || uint32(mi.Major) != unix.Major(node.Dev) || uint32(mi.Minor) != unix.Minor(node.Dev) {
			continue
		}
		var st unix.Stat_t
		if unix.Stat(mi.MountPoint, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFBLK && st.Rdev == node.Rdev {
			refs = append(refs, mi.MountPoint)
		}
	}
	return refs
}

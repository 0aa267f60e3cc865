//go:build linux

package mounter

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/diskplane/diskplane/pkg/health"
)

const healthVol = "vol-0123456789abcdef0"

// fakeNode is a node's kernel as the health checker reads it: a sysfs tree
// and a mount table in a temporary directory, and stat/statfs answers.
type fakeNode struct {
	t        *testing.T
	root     string
	mounts   []string
	stats    map[string]unix.Stat_t
	statErrs map[string]error
	fsBlocks map[string]uint64 // statfs blocks (4 KiB) by path
	shutDown map[string]bool   // paths whose xattr lookups fail with EIO
	wrong    map[string]bool   // device nodes verify refuses
	found    string            // what find answers for the volume ("": none)
}

func newFakeNode(t *testing.T) *fakeNode {
	n := &fakeNode{t: t, root: t.TempDir(), stats: map[string]unix.Stat_t{}, statErrs: map[string]error{},
		fsBlocks: map[string]uint64{}, wrong: map[string]bool{}, shutDown: map[string]bool{}}
	return n
}

func (n *fakeNode) sys(parts ...string) string {
	return filepath.Join(append([]string{n.root, "sys"}, parts...)...)
}

func (n *fakeNode) write(path, content string) {
	n.t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		n.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content+"\n"), 0o644); err != nil {
		n.t.Fatal(err)
	}
}

// disk adds a block device to sysfs: /sys/dev/block/M:m links to its
// directory, which has size (in bytes here, written as sectors) and attrs
// (relative paths such as "device/state").
func (n *fakeNode) disk(name string, num devNum, sizeBytes int64, attrs map[string]string) string {
	n.t.Helper()
	dir := n.sys("devices", "virtual", "block", name)
	n.write(filepath.Join(dir, "size"), fmt.Sprint(sizeBytes/512))
	n.write(filepath.Join(dir, "dev"), num.String())
	for attr, v := range attrs {
		n.write(filepath.Join(dir, attr), v)
	}
	link := n.sys("dev", "block", num.String())
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		n.t.Fatal(err)
	}
	if err := os.Symlink(dir, link); err != nil {
		n.t.Fatal(err)
	}
	return dir
}

// mount adds a mount table line: mountPoint shows source's fsType (device
// num) with per-mount and super block options.
func (n *fakeNode) mount(mountPoint string, num devNum, fsType, source, mountOpts, superOpts string) {
	id := 100 + len(n.mounts)
	n.mounts = append(n.mounts, fmt.Sprintf("%d 1 %s / %s %s shared:1 - %s %s %s", id, num, mountPoint, mountOpts, fsType, source, superOpts))
	if _, ok := n.stats[mountPoint]; !ok {
		n.stats[mountPoint] = unix.Stat_t{Mode: unix.S_IFDIR}
	}
}

// mountPoint makes a real directory, so that symlinks resolve.
func (n *fakeNode) mountPoint(name string) string {
	p := filepath.Join(n.root, "kubelet", name)
	if err := os.MkdirAll(p, 0o755); err != nil {
		n.t.Fatal(err)
	}
	return p
}

func (n *fakeNode) checker() *healthChecker {
	n.t.Helper()
	n.write(filepath.Join(n.root, "mountinfo"), strings.Join(n.mounts, "\n"))
	return &healthChecker{
		sysDir: n.sys(), devDir: "/dev", mountInfo: filepath.Join(n.root, "mountinfo"),
		verify: func(volumeID, dev string) error {
			if n.wrong[dev] {
				return fmt.Errorf("%w: %s has serial vol-other", ErrWrongDevice, dev)
			}
			return nil
		},
		find: func(string) (string, error) {
			if n.found == "" {
				return "", ErrDeviceNotFound
			}
			return n.found, nil
		},
		stat: func(path string, st *unix.Stat_t) error {
			if err := n.statErrs[path]; err != nil {
				return &os.PathError{Op: "stat", Path: path, Err: err}
			}
			s, ok := n.stats[path]
			if !ok {
				return unix.ENOENT
			}
			*st = s
			return nil
		},
		statfs: func(path string, st *unix.Statfs_t) error {
			*st = unix.Statfs_t{Bsize: 4096, Frsize: 4096, Blocks: n.fsBlocks[path]}
			return nil
		},
		getxattr: func(path, name string) error {
			if n.shutDown[path] {
				return unix.EIO
			}
			return unix.ENODATA
		},
	}
}

func TestVolumeHealthChecks(t *testing.T) {
	const gib = int64(1) << 30
	loop := devNum{7, 3}
	nvme := devNum{259, 1}
	sdb := devNum{8, 16}
	dm := devNum{253, 0}
	type finding struct {
		kind   health.Kind
		reason string
	}
	tests := []struct {
		name    string
		setup   func(n *fakeNode) []string // returns the paths to check
		want    []finding
		message []string
		err     error
	}{
		{name: "healthy ext4, staged and published", setup: func(n *fakeNode) []string {
			n.disk("nvme1n1", nvme, 8*gib, map[string]string{"device/state": "live"})
			staging, target := n.mountPoint("staging"), n.mountPoint("target")
			n.mount(staging, nvme, "ext4", "/dev/nvme1n1", "rw,relatime", "rw")
			n.mount(target, nvme, "ext4", "/dev/nvme1n1", "rw,relatime", "rw")
			n.write(n.sys("fs", "ext4", "nvme1n1", "errors_count"), "0")
			n.fsBlocks[target] = uint64(7 * gib / 4096)
			return []string{target, staging}
		}},
		{name: "a read-only bind of a writable filesystem is as asked", setup: func(n *fakeNode) []string {
			n.disk("nvme1n1", nvme, 8*gib, nil)
			target := n.mountPoint("target")
			n.mount(target, nvme, "xfs", "/dev/nvme1n1", "ro,relatime", "rw,nouuid")
			return []string{target}
		}},
		{name: "device gone under the mount", setup: func(n *fakeNode) []string {
			target := n.mountPoint("target")
			n.mount(target, nvme, "ext4", "/dev/nvme1n1", "rw", "rw")
			return []string{target}
		}, want: []finding{{health.Inaccessible, "DeviceGone"}}, message: []string{"259:1", "gone from this node", "delete the pod"}},
		{name: "device without capacity", setup: func(n *fakeNode) []string {
			n.disk("nvme1n1", nvme, 0, map[string]string{"device/state": "live"})
			target := n.mountPoint("target")
			n.mount(target, nvme, "ext4", "/dev/nvme1n1", "rw", "rw")
			n.fsBlocks[target] = 1000
			return []string{target}
		}, want: []finding{{health.Inaccessible, "DeviceNoCapacity"}}},
		{name: "loop device emptied under the mount: no capacity, and no identity to check", setup: func(n *fakeNode) []string {
			// A detached loop device the kernel has not removed yet is
			// backed by nothing, which verify refuses as another volume.
			n.disk("loop3", loop, 0, nil)
			n.wrong["/dev/loop3"] = true
			target := filepath.Join(n.root, "block-target")
			n.stats[target] = unix.Stat_t{Mode: unix.S_IFBLK, Rdev: unix.Mkdev(loop.major, loop.minor)}
			return []string{target}
		}, want: []finding{{health.Inaccessible, "DeviceNoCapacity"}}},
		{name: "device number reused by another disk", setup: func(n *fakeNode) []string {
			n.disk("nvme1n1", nvme, 8*gib, nil)
			n.wrong["/dev/nvme1n1"] = true
			target := n.mountPoint("target")
			n.mount(target, nvme, "ext4", "/dev/nvme1n1", "rw", "rw")
			return []string{target}
		}, want: []finding{{health.Inaccessible, "DeviceReplaced"}}, message: []string{"vol-other"}},
		{name: "ext4 made read-only after errors (emergency_ro)", setup: func(n *fakeNode) []string {
			n.disk("loop3", loop, gib, nil)
			target := n.mountPoint("target")
			n.mount(target, loop, "ext4", "/dev/loop3", "rw,relatime", "rw,errors=remount-ro,emergency_ro")
			return []string{target}
		}, want: []finding{{health.Inaccessible, "FilesystemReadOnly"}}, message: []string{"read-only after errors", "e2fsck"}},
		{name: "filesystem read-only under a writable mount (older kernels)", setup: func(n *fakeNode) []string {
			n.disk("loop3", loop, gib, nil)
			target := n.mountPoint("target")
			n.mount(target, loop, "ext4", "/dev/loop3", "rw,relatime", "ro,errors=remount-ro")
			return []string{target}
		}, want: []finding{{health.Inaccessible, "FilesystemReadOnly"}}},
		{name: "ext4 shut down after errors (no read-only flag shown)", setup: func(n *fakeNode) []string {
			n.disk("loop3", loop, gib, nil)
			target := n.mountPoint("target")
			n.mount(target, loop, "ext4", "/dev/loop3", "rw,relatime", "rw")
			n.shutDown[target] = true
			return []string{target}
		}, want: []finding{{health.Inaccessible, "FilesystemShutDown"}}, message: []string{"shut the ext4 filesystem", "e2fsck -f"}},
		{name: "xfs is not probed for an ext4 shutdown", setup: func(n *fakeNode) []string {
			n.disk("loop3", loop, gib, nil)
			target := n.mountPoint("target")
			n.mount(target, loop, "xfs", "/dev/loop3", "rw,relatime", "rw")
			n.shutDown[target] = true
			return []string{target}
		}},
		{name: "ext4 recorded I/O errors", setup: func(n *fakeNode) []string {
			n.disk("loop3", loop, gib, nil)
			target := n.mountPoint("target")
			n.mount(target, loop, "ext4", "/dev/loop3", "rw", "rw")
			dir := n.sys("fs", "ext4", "loop3")
			for attr, v := range map[string]string{"errors_count": "3", "first_error_errcode": "2", "first_error_func": "ext4_journal_check_start",
				"first_error_time": "1795507326", "last_error_errcode": "2", "last_error_func": "__ext4_get_inode_loc", "last_error_time": "1795507400"} {
				n.write(filepath.Join(dir, attr), v)
			}
			return []string{target}
		}, want: []finding{{health.Degraded, "FilesystemErrors"}},
			message: []string{"recorded 3 error(s)", "first EIO in ext4_journal_check_start at 2026-11-24", "last EIO in __ext4_get_inode_loc", "e2fsck -f"}},
		{name: "ext4 recorded corruption", setup: func(n *fakeNode) []string {
			n.disk("loop3", loop, gib, nil)
			target := n.mountPoint("target")
			n.mount(target, loop, "ext4", "/dev/loop3", "rw", "rw")
			n.write(n.sys("fs", "ext4", "loop3", "errors_count"), "1")
			n.write(n.sys("fs", "ext4", "loop3", "first_error_errcode"), "5")
			return []string{target}
		}, want: []finding{{health.DataLoss, "FilesystemCorrupted"}}, message: []string{"first EFSCORRUPTED"}},
		{name: "device smaller than its filesystem", setup: func(n *fakeNode) []string {
			n.disk("loop3", loop, 512, nil)
			target := n.mountPoint("target")
			n.mount(target, loop, "ext4", "/dev/loop3", "rw", "rw")
			n.fsBlocks[target] = uint64(gib / 4096)
			return []string{target}
		}, want: []finding{{health.Inaccessible, "DeviceSmallerThanFilesystem"}}, message: []string{"has 512 bytes"}},
		{name: "stale mount", setup: func(n *fakeNode) []string {
			n.disk("loop3", loop, gib, nil)
			target := n.mountPoint("target")
			n.mount(target, loop, "ext4", "/dev/loop3", "rw", "rw")
			n.statErrs[target] = unix.ENOTCONN
			return []string{target}
		}, want: []finding{{health.Inaccessible, "MountCorrupted"}}, message: []string{"transport endpoint is not connected"}},
		{name: "xfs shut down", setup: func(n *fakeNode) []string {
			target := n.mountPoint("target")
			n.mount(target, loop, "xfs", "/dev/loop3", "rw", "rw,nouuid")
			n.statErrs[target] = unix.EIO
			return []string{target}
		}, want: []finding{{health.Inaccessible, "FilesystemShutDown"}, {health.Inaccessible, "DeviceGone"}}, message: []string{"xfs_repair"}},
		{name: "ext4 shut down: its recorded errors are read though every stat fails", setup: func(n *fakeNode) []string {
			n.disk("loop3", loop, gib, nil)
			target := n.mountPoint("target")
			n.mount(target, loop, "ext4", "/dev/loop3", "rw", "rw")
			n.statErrs[target] = unix.EIO
			n.write(n.sys("fs", "ext4", "loop3", "errors_count"), "1")
			n.write(n.sys("fs", "ext4", "loop3", "first_error_errcode"), "2")
			return []string{target}
		}, want: []finding{{health.Inaccessible, "FilesystemShutDown"}, {health.Degraded, "FilesystemErrors"}},
			message: []string{"answers every access with an I/O error", "recorded 1 error(s) (first EIO"}},
		{name: "SCSI disk counting I/O errors", setup: func(n *fakeNode) []string {
			n.disk("sdb", sdb, 8*gib, map[string]string{"device/state": "running", "device/ioerr_cnt": "0x3", "device/iotmo_cnt": "0x1"})
			target := n.mountPoint("target")
			n.mount(target, sdb, "ext4", "/dev/sdb", "rw", "rw")
			return []string{target}
		}, want: []finding{{health.Degraded, "DeviceIOErrors"}}, message: []string{"failed 3 I/O request(s) and timed out 1"}},
		{name: "SCSI disk offline", setup: func(n *fakeNode) []string {
			n.disk("sdb", sdb, 8*gib, map[string]string{"device/state": "offline", "device/ioerr_cnt": "0x0"})
			target := n.mountPoint("target")
			n.mount(target, sdb, "ext4", "/dev/sdb", "rw", "rw")
			return []string{target}
		}, want: []finding{{health.Inaccessible, "DeviceNotRunning"}}, message: []string{"sdb", "is offline"}},
		{name: "NVMe controller resetting", setup: func(n *fakeNode) []string {
			n.disk("nvme1n1", nvme, 8*gib, map[string]string{"device/state": "resetting"})
			target := n.mountPoint("target")
			n.mount(target, nvme, "ext4", "/dev/nvme1n1", "rw", "rw")
			return []string{target}
		}, want: []finding{{health.Degraded, "DeviceNotRunning"}}},
		{name: "raw block volume", setup: func(n *fakeNode) []string {
			n.disk("nvme1n1", nvme, 8*gib, map[string]string{"device/state": "live"})
			target := filepath.Join(n.root, "block-target")
			n.stats[target] = unix.Stat_t{Mode: unix.S_IFBLK, Rdev: unix.Mkdev(nvme.major, nvme.minor)}
			return []string{target}
		}},
		{name: "raw block volume whose device is gone", setup: func(n *fakeNode) []string {
			target := filepath.Join(n.root, "block-target")
			n.stats[target] = unix.Stat_t{Mode: unix.S_IFBLK, Rdev: unix.Mkdev(nvme.major, nvme.minor)}
			return []string{target}
		}, want: []finding{{health.Inaccessible, "DeviceGone"}}},
		{name: "encrypted volume: the device under device-mapper is checked", setup: func(n *fakeNode) []string {
			under := n.disk("nvme1n1", nvme, 8*gib, map[string]string{"device/state": "dead"})
			mapped := n.disk("dm-0", dm, 8*gib-2<<20, map[string]string{"dm/suspended": "1"})
			if err := os.MkdirAll(filepath.Join(mapped, "slaves"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(under, filepath.Join(mapped, "slaves", "nvme1n1")); err != nil {
				t.Fatal(err)
			}
			target := n.mountPoint("target")
			n.mount(target, dm, "ext4", "/dev/mapper/vol-0123456789abcdef0", "rw", "rw")
			return []string{target}
		}, want: []finding{{health.Degraded, "DeviceSuspended"}, {health.Inaccessible, "DeviceNotRunning"}}},
		{name: "errors of an encrypted volume's ext4 are found under the kernel's name", setup: func(n *fakeNode) []string {
			under := n.disk("nvme1n1", nvme, 8*gib, map[string]string{"device/state": "live"})
			mapped := n.disk("dm-0", dm, 8*gib-2<<20, map[string]string{"dm/suspended": "0"})
			if err := os.MkdirAll(filepath.Join(mapped, "slaves"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(under, filepath.Join(mapped, "slaves", "nvme1n1")); err != nil {
				t.Fatal(err)
			}
			target := n.mountPoint("target")
			n.mount(target, dm, "ext4", "/dev/mapper/luks-vol-0123456789abcdef0", "rw", "rw")
			n.write(n.sys("fs", "ext4", "dm-0", "errors_count"), "2")
			return []string{target}
		}, want: []finding{{health.Degraded, "FilesystemErrors"}}, message: []string{"recorded 2 error(s)"}},
		{name: "no path: the volume's device and its mounts", setup: func(n *fakeNode) []string {
			n.disk("loop3", loop, gib, nil)
			n.found = "/dev/loop3"
			n.stats["/dev/loop3"] = unix.Stat_t{Mode: unix.S_IFBLK, Rdev: unix.Mkdev(loop.major, loop.minor)}
			n.mount(n.mountPoint("staging"), loop, "ext4", "/dev/loop3", "rw", "rw,emergency_ro")
			return nil
		}, want: []finding{{health.Inaccessible, "FilesystemReadOnly"}}},
		{name: "path gone, device still here", setup: func(n *fakeNode) []string {
			n.disk("loop3", loop, gib, nil)
			n.found = "/dev/loop3"
			n.stats["/dev/loop3"] = unix.Stat_t{Mode: unix.S_IFBLK, Rdev: unix.Mkdev(loop.major, loop.minor)}
			return []string{filepath.Join(n.root, "gone")}
		}, message: []string{"healthy", "does not exist"}},
		{name: "neither mounted nor attached", setup: func(n *fakeNode) []string {
			return []string{n.mountPoint("not-mounted")}
		}, err: ErrNotOnNode},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := newFakeNode(t)
			paths := tc.setup(n)
			r, err := n.checker().check(healthVol, paths)
			if tc.err != nil || err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("check = %v, want %v", err, tc.err)
				}
				return
			}
			var got []finding
			for _, f := range r.Findings {
				got = append(got, finding{f.Kind, f.Reason})
				if !strings.Contains(f.Message, healthVol) && !strings.Contains(f.Message, "device") {
					t.Errorf("finding %s names neither the volume nor its device: %q", f.Reason, f.Message)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("findings %v, want %v\n%s", got, tc.want, r.Message())
			}
			for _, part := range tc.message {
				if !strings.Contains(r.Message(), part) {
					t.Errorf("message %q does not contain %q", r.Message(), part)
				}
			}
		})
	}
}

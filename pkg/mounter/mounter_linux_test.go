//go:build linux

package mounter_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/diskplane/diskplane/pkg/mounter"
	"github.com/diskplane/diskplane/pkg/mounter/mountertest"
	"github.com/diskplane/diskplane/pkg/testutil"
)

const mib = 1 << 20

// rig is one test's private world: a directory for volume files, a by-id
// link directory and a Mounter that looks there.
type rig struct {
	t       *testing.T
	dir     string
	linkDir string
	m       mounter.Mounter
}

func newRig(t *testing.T) *rig {
	// LUKS2 headers at Argon2id's least fixed cost: the tests format many,
	// and tuning each one's cost takes seconds under the node VM's
	// emulation (TestLUKSLifecycle formats as a node does by default).
	return newRigWith(t, mounter.Options{LUKSPBKDFMemoryKiB: 8 << 10, LUKSPBKDFIterations: 4})
}

// newRigWith is newRig with a mounter of these options (the rig sets where
// devices are found).
func newRigWith(t *testing.T, o mounter.Options) *rig {
	t.Helper()
	testutil.RequireRoot(t, "losetup", "mkfs.ext4", "mkfs.xfs", "blkid", "resize2fs", "xfs_growfs")
	dir := t.TempDir()
	r := &rig{t: t, dir: dir, linkDir: filepath.Join(dir, "by-id")}
	o.DeviceLinkDir, o.EmulatorLoopDevices = r.linkDir, true
	m, err := mounter.New(o)
	if err != nil {
		t.Fatal(err)
	}
	r.m = m
	return r
}

func (r *rig) volume(sizeBytes int64) *mountertest.Volume {
	return mountertest.NewVolume(r.t, r.dir, r.linkDir, mountertest.NewVolumeID(r.t), sizeBytes)
}

// mountPoint returns a fresh directory that is unmounted and removed when
// the test ends.
func (r *rig) mountPoint(name string) string {
	r.t.Helper()
	p := filepath.Join(r.dir, name)
	if err := os.MkdirAll(p, 0o750); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() {
		if err := r.m.CleanupMountPoint(p); err != nil {
			r.t.Errorf("cleanup %s: %v", p, err)
		}
	})
	return p
}

func (r *rig) find(v *mountertest.Volume) string {
	r.t.Helper()
	dev, err := r.m.FindDevice(context.Background(), v.ID, "")
	if err != nil {
		r.t.Fatal(err)
	}
	return dev
}

func (r *rig) unmount(p string) {
	r.t.Helper()
	if err := r.m.Unmount(p); err != nil {
		r.t.Fatal(err)
	}
}

func TestFormatAndMountKeepsData(t *testing.T) {
	for _, fsType := range []string{"ext4", "ext3", "xfs"} {
		t.Run(fsType, func(t *testing.T) {
			r := newRig(t)
			v := r.volume(320 * mib)
			dev := r.find(v)
			if dev != v.Device {
				t.Fatalf("FindDevice = %s, want %s", dev, v.Device)
			}
			target := r.mountPoint("stage")
			if err := r.m.FormatAndMount(v.ID, dev, target, fsType, nil, nil); err != nil {
				t.Fatal(err)
			}
			if got, err := r.m.MountedDevice(target); err != nil || got != v.Device {
				t.Fatalf("MountedDevice = %q, %v; want %s", got, err, v.Device)
			}
			if err := os.WriteFile(filepath.Join(target, "data"), []byte("keep me"), 0o600); err != nil {
				t.Fatal(err)
			}
			r.unmount(target)
			// The second time the device holds the filesystem: it must be
			// mounted as it is, not formatted again.
			if err := r.m.FormatAndMount(v.ID, dev, target, fsType, nil, nil); err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(filepath.Join(target, "data")); err != nil || string(b) != "keep me" {
				t.Fatalf("data after remount = %q, %v", b, err)
			}
			r.unmount(target)
		})
	}
}

func TestFormatAppliesMkfsOptions(t *testing.T) {
	r := newRig(t)
	v := r.volume(320 * mib)
	target := r.mountPoint("stage")
	if err := r.m.FormatAndMount(v.ID, r.find(v), target, "ext4", []string{"-b", "1024", "-N", "5000"}, nil); err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(target, &st); err != nil {
		t.Fatal(err)
	}
	// mkfs rounds the inode count up to fill whole inode tables.
	if st.Bsize != 1024 || st.Files < 5000 || st.Files > 6000 {
		t.Fatalf("block size %d, inodes %d; want 1024 and about 5000", st.Bsize, st.Files)
	}
	r.unmount(target)
}

// TestFormatRefusesDevicesWithData checks the rule that protects users'
// data: a device holding anything but the requested filesystem is neither
// formatted nor mounted, and its bytes stay as they were.
func TestFormatRefusesDevicesWithData(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(t *testing.T, dev string)
		fsType  string
	}{
		{name: "xfs requested as ext4", fsType: "ext4", prepare: func(t *testing.T, dev string) { run(t, "mkfs.xfs", "-q", dev) }},
		{name: "ext4 requested as xfs", fsType: "xfs", prepare: func(t *testing.T, dev string) { run(t, "mkfs.ext4", "-q", dev) }},
		{name: "ext4 requested as ext3", fsType: "ext3", prepare: func(t *testing.T, dev string) { run(t, "mkfs.ext4", "-q", dev) }},
		{name: "partition table", fsType: "ext4", prepare: writeMBR},
		{name: "LUKS header", fsType: "ext4", prepare: func(t *testing.T, dev string) {
			testutil.RequireRoot(t, "cryptsetup")
			key := filepath.Join(t.TempDir(), "key")
			if err := os.WriteFile(key, []byte("not a secret"), 0o600); err != nil {
				t.Fatal(err)
			}
			run(t, "cryptsetup", "luksFormat", "--batch-mode", "--type", "luks2", "--pbkdf", "pbkdf2",
				"--pbkdf-force-iterations", "1000", "--key-file", key, dev)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			v := r.volume(320 * mib)
			dev := r.find(v)
			tc.prepare(t, dev)
			flush(t, dev)
			before := checksum(t, v.File)
			target := r.mountPoint("stage")
			err := r.m.FormatAndMount(v.ID, dev, target, tc.fsType, nil, nil)
			if !errors.Is(err, mounter.ErrFilesystemMismatch) {
				t.Fatalf("FormatAndMount = %v, want ErrFilesystemMismatch", err)
			}
			if mounted, err := r.m.IsMountPoint(target); err != nil || mounted {
				t.Fatalf("target mounted = %v, %v after a refusal", mounted, err)
			}
			flush(t, dev)
			if after := checksum(t, v.File); after != before {
				t.Fatal("the device's bytes changed after a refused FormatAndMount")
			}
		})
	}
}

// TestFormatNeverFollowsAFailedProbe is the data-loss case of a device
// that blkid could not open: blkid then exits with the status it uses for
// "nothing found", and a driver that trusts that status formats a volume
// full of data once the device is back. Here a real loop device holds ext4
// with a file, and the blkid the mounter runs fails once the way it does
// on ENXIO. Staging must fail without writing a byte, and the next attempt
// must mount the data as it is.
func TestFormatNeverFollowsAFailedProbe(t *testing.T) {
	r := newRig(t)
	v := r.volume(320 * mib)
	dev := r.find(v)
	target := r.mountPoint("stage")
	if err := r.m.FormatAndMount(v.ID, dev, target, "ext4", nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(target, "data"), []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	r.unmount(target)
	flush(t, dev)
	before := checksum(t, v.File)

	failOnce(t, "blkid", "No such device or address")
	if err := r.m.FormatAndMount(v.ID, dev, target, "ext4", nil, nil); err == nil {
		t.Fatal("FormatAndMount succeeded although blkid could not open the device")
	}
	if mounted, err := r.m.IsMountPoint(target); err != nil || mounted {
		t.Fatalf("target mounted = %v, %v after a failed probe", mounted, err)
	}
	flush(t, dev)
	if after := checksum(t, v.File); after != before {
		t.Fatal("the device's bytes changed after a failed probe")
	}
	if err := r.m.FormatAndMount(v.ID, dev, target, "ext4", nil, nil); err != nil {
		t.Fatalf("the retry: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(target, "data")); err != nil || string(b) != "keep me" {
		t.Fatalf("data after the retry = %q, %v", b, err)
	}
	r.unmount(target)
}

// failOnce puts a program named name first in PATH for the rest of the
// test: its first run prints "error: <last argument>: <message>" to stderr
// and exits 2, as blkid does when it cannot open a device; later runs are
// the real program.
func failOnce(t *testing.T, name, message string) { failOnceWith(t, name, "", message) }

// failOnceWith is failOnce for the first run of name whose arguments
// include the argument arg (any run, for ""); other runs are the real
// program.
func failOnceWith(t *testing.T, name, arg, message string) {
	t.Helper()
	real, err := exec.LookPath(name)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	marker := filepath.Join(dir, "failed")
	script := fmt.Sprintf(`#!/bin/sh
match=%[4]q
for a; do [ "$a" = "$match" ] && match=; done
if [ -z "$match" ] && [ ! -e %[1]q ]; then
	: > %[1]q
	for last; do :; done
	echo "error: $last: %[2]s" >&2
	exit 2
fi
exec %[3]q "$@"
`, marker, message, real, arg)
	if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
}

func TestFindDeviceRefusesLoopOfAnotherVolume(t *testing.T) {
	r := newRig(t)
	v := r.volume(64 * mib)
	other := mountertest.NewVolumeID(t)
	// A by-id link for "other" that points at v's device, as a stale link would.
	if err := os.Symlink(v.Device, filepath.Join(r.linkDir, "nvme-Amazon_Elastic_Block_Store_"+strings.Replace(other, "-", "", 1))); err != nil {
		t.Fatal(err)
	}
	if _, err := r.m.FindDevice(context.Background(), other, ""); !errors.Is(err, mounter.ErrWrongDevice) {
		t.Fatalf("FindDevice(%s) = %v, want ErrWrongDevice", other, err)
	}
	if err := r.m.VerifyDevice(v.ID, v.Device); err != nil {
		t.Fatalf("VerifyDevice of the right volume: %v", err)
	}
}

func TestResizeWhileMounted(t *testing.T) {
	for _, fsType := range []string{"ext4", "xfs"} {
		t.Run(fsType, func(t *testing.T) {
			// A gibibyte, so mkfs picks 4 KiB blocks as on real volumes: the
			// kernel cannot grow some 1 KiB-block ext4 layouts online.
			r := newRig(t)
			if fsType == "ext4" {
				mountertest.RequireExt4OnlineResize(t)
			}
			v := r.volume(1024 * mib)
			dev := r.find(v)
			target := r.mountPoint("stage")
			if err := r.m.FormatAndMount(v.ID, dev, target, fsType, nil, nil); err != nil {
				t.Fatal(err)
			}
			before, err := r.m.FilesystemStats(target)
			if err != nil {
				t.Fatal(err)
			}
			if need, err := r.m.NeedResize(dev, target); err != nil || need {
				t.Fatalf("NeedResize of a new filesystem = %v, %v; want false", need, err)
			}
			v.Grow(t, 2048*mib)
			if size, err := r.m.DeviceSize(dev); err != nil || size != 2048*mib {
				t.Fatalf("DeviceSize = %d, %v; want %d", size, err, 2048*mib)
			}
			need, err := r.m.NeedResize(dev, target)
			if err != nil || !need {
				t.Fatalf("NeedResize = %v, %v; want true", need, err)
			}
			if err := r.m.Resize(dev, target); err != nil {
				t.Fatal(err)
			}
			after, err := r.m.FilesystemStats(target)
			if err != nil {
				t.Fatal(err)
			}
			if after.TotalBytes < before.TotalBytes+900*mib {
				t.Fatalf("filesystem grew from %d to %d bytes; want about 1 GiB more", before.TotalBytes, after.TotalBytes)
			}
			r.unmount(target)
		})
	}
}

func TestBindMounts(t *testing.T) {
	r := newRig(t)
	v := r.volume(64 * mib)
	dev := r.find(v)
	stage := r.mountPoint("stage")
	if err := r.m.FormatAndMount(v.ID, dev, stage, "ext4", nil, nil); err != nil {
		t.Fatal(err)
	}
	ro := r.mountPoint("ro")
	if err := r.m.BindMount(stage, ro, []string{"ro"}); err != nil {
		t.Fatal(err)
	}
	if mounted, err := r.m.IsMountPoint(ro); err != nil || !mounted {
		t.Fatalf("IsMountPoint(bind) = %v, %v", mounted, err)
	}
	if err := os.WriteFile(filepath.Join(ro, "x"), nil, 0o600); !errors.Is(err, unix.EROFS) {
		t.Fatalf("write through a read-only bind = %v, want EROFS", err)
	}
	if err := r.m.CleanupMountPoint(ro); err != nil {
		t.Fatal(err)
	}
	if exists, err := r.m.PathExists(ro); err != nil || exists {
		t.Fatalf("after CleanupMountPoint the path exists = %v, %v", exists, err)
	}
	if err := r.m.CleanupMountPoint(ro); err != nil {
		t.Fatalf("CleanupMountPoint of a missing path: %v", err)
	}
	r.unmount(stage)
}

func TestBlockBindMount(t *testing.T) {
	r := newRig(t)
	v := r.volume(64 * mib)
	dev := r.find(v)
	target := filepath.Join(r.dir, "pods", "p1", "dev", "block")
	if err := r.m.MakeFile(target); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.m.CleanupMountPoint(target) })
	if err := r.m.BindMount(dev, target, nil); err != nil {
		t.Fatal(err)
	}
	if isDev, err := r.m.IsBlockDevice(target); err != nil || !isDev {
		t.Fatalf("IsBlockDevice(target) = %v, %v", isDev, err)
	}
	if size, err := r.m.DeviceSize(target); err != nil || size != 64*mib {
		t.Fatalf("DeviceSize(target) = %d, %v", size, err)
	}
	payload := []byte("raw bytes through the bind mount")
	mountertest.WriteAt(t, target, payload, 4096)
	if got := mountertest.ReadAt(t, dev, len(payload), 4096); !bytes.Equal(got, payload) {
		t.Fatalf("device holds %q, want %q", got, payload)
	}
	if err := r.m.CleanupMountPoint(target); err != nil {
		t.Fatal(err)
	}
}

// TestMountRefs checks that the publications of a staged filesystem (bind
// mounts of its staging directory) and of a raw block device (bind mounts
// of its node) are found, and nothing else is.
func TestMountRefs(t *testing.T) {
	r := newRig(t)
	v := r.volume(64 * mib)
	dev := r.find(v)
	stage := r.mountPoint("stage")
	if err := r.m.FormatAndMount(v.ID, dev, stage, "ext4", nil, nil); err != nil {
		t.Fatal(err)
	}
	pod1, pod2 := r.mountPoint("pod1"), r.mountPoint("pod2")
	for _, p := range []string{pod1, pod2} {
		if err := r.m.BindMount(stage, p, nil); err != nil {
			t.Fatal(err)
		}
	}
	block := filepath.Join(r.dir, "pod3", "dev", "block")
	if err := r.m.MakeFile(block); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.m.CleanupMountPoint(block) })
	if err := r.m.BindMount(dev, block, nil); err != nil {
		t.Fatal(err)
	}
	unused := r.mountPoint("unused")

	tests := []struct {
		name, path string
		want       []string
	}{
		{"staged filesystem: its bind mounts", stage, []string{pod1, pod2}},
		{"device node: the files it is bound onto", dev, []string{block}},
		{"a bind mount: the staging path and the other bind", pod1, []string{stage, pod2}},
		{"a directory nothing is mounted from", unused, nil},
		{"a missing path", filepath.Join(r.dir, "missing"), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := r.m.MountRefs(tc.path)
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(got)
			want := slices.Sorted(slices.Values(tc.want))
			if !slices.Equal(got, want) {
				t.Fatalf("MountRefs(%s) = %q, want %q", tc.path, got, want)
			}
		})
	}
}

// TestMountedReadOnly checks that a bind mount's own read-only state is
// read, not the staged filesystem's, for a directory and for a block
// device's file, and that a path nothing is mounted at is "not exist".
func TestMountedReadOnly(t *testing.T) {
	r := newRig(t)
	v := r.volume(64 * mib)
	dev := r.find(v)
	stage := r.mountPoint("stage")
	if err := r.m.FormatAndMount(v.ID, dev, stage, "ext4", nil, nil); err != nil {
		t.Fatal(err)
	}
	rw, ro := r.mountPoint("rw"), r.mountPoint("ro")
	if err := r.m.BindMount(stage, rw, nil); err != nil {
		t.Fatal(err)
	}
	if err := r.m.BindMount(stage, ro, []string{"ro"}); err != nil {
		t.Fatal(err)
	}
	block := filepath.Join(r.dir, "pod", "dev", "block")
	if err := r.m.MakeFile(block); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.m.CleanupMountPoint(block) })
	if err := r.m.BindMount(dev, block, []string{"ro"}); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name, path string
		want       bool
		missing    bool
	}{
		{name: "staged filesystem", path: stage},
		{name: "read-write bind mount", path: rw},
		{name: "read-only bind mount of a read-write filesystem", path: ro, want: true},
		{name: "read-only bind mount of a device node", path: block, want: true},
		{name: "a directory nothing is mounted at", path: r.mountPoint("unused"), missing: true},
		{name: "a missing path", path: filepath.Join(r.dir, "missing"), missing: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := r.m.MountedReadOnly(tc.path)
			if tc.missing {
				if !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("MountedReadOnly(%s) = %t, %v; want fs.ErrNotExist", tc.path, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("MountedReadOnly(%s) = %t, %v; want %t", tc.path, got, err, tc.want)
			}
		})
	}
}

// TestRemountFilesystem: remounting a staged filesystem read-only reaches
// a bind mount made of it before (a pod's publication), which then refuses
// writes, and remounting it read-write gives them back; what was written
// stays.
func TestRemountFilesystem(t *testing.T) {
	for _, fsType := range []string{"ext4", "xfs"} {
		t.Run(fsType, func(t *testing.T) {
			r := newRig(t)
			v := r.volume(320 * mib)
			dev := r.find(v)
			stage := r.mountPoint("stage")
			if err := r.m.FormatAndMount(v.ID, dev, stage, fsType, nil, nil); err != nil {
				t.Fatal(err)
			}
			pod := r.mountPoint("pod")
			if err := r.m.BindMount(stage, pod, nil); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(pod, "before"), []byte("kept"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := r.m.RemountFilesystem(stage, true); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(pod, "fenced"), nil, 0o600); !errors.Is(err, unix.EROFS) {
				t.Fatalf("a write through the pod's bind mount of a filesystem remounted read-only: %v, want EROFS", err)
			}
			if got, err := os.ReadFile(filepath.Join(pod, "before")); err != nil || string(got) != "kept" {
				t.Fatalf("read through the fenced mount: %q, %v", got, err)
			}
			if err := r.m.RemountFilesystem(stage, false); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(pod, "after"), nil, 0o600); err != nil {
				t.Fatalf("a write after the remount read-write: %v", err)
			}
		})
	}
	if err := newRig(t).m.RemountFilesystem(filepath.Join(t.TempDir(), "nothing"), true); err == nil {
		t.Fatal("remounting where nothing is mounted succeeded")
	}
}

// TestStatsMatchDF compares FilesystemStats with what df reports.
func TestStatsMatchDF(t *testing.T) {
	r := newRig(t)
	v := r.volume(128 * mib)
	target := r.mountPoint("stage")
	if err := r.m.FormatAndMount(v.ID, r.find(v), target, "ext4", nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(target, "f"), bytes.Repeat([]byte{1}, 3*mib), 0o600); err != nil {
		t.Fatal(err)
	}
	unix.Sync()
	got, err := r.m.FilesystemStats(target)
	if err != nil {
		t.Fatal(err)
	}
	want := dfStats(t, target)
	if got != want {
		t.Fatalf("FilesystemStats = %+v, df says %+v", got, want)
	}
	r.unmount(target)
}

func dfStats(t *testing.T, path string) mounter.Stats {
	t.Helper()
	field := func(output string) []int64 {
		lines := strings.Split(strings.TrimSpace(output), "\n")
		var nums []int64
		for _, f := range strings.Fields(lines[len(lines)-1]) {
			n, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				t.Fatalf("df output %q: %v", output, err)
			}
			nums = append(nums, n)
		}
		return nums
	}
	b := field(run(t, "df", "-B1", "--output=size,used,avail", path))
	i := field(run(t, "df", "--output=itotal,iused,iavail", path))
	return mounter.Stats{TotalBytes: b[0], UsedBytes: b[1], AvailableBytes: b[2], TotalInodes: i[0], UsedInodes: i[1], FreeInodes: i[2]}
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v: %s", name, args, err, out)
	}
	return string(out)
}

// writeMBR writes a DOS partition table with one Linux partition.
func writeMBR(t *testing.T, dev string) {
	mbr := make([]byte, 512)
	entry := mbr[446:462]
	entry[4] = 0x83                                    // Linux
	copy(entry[8:12], []byte{0x00, 0x08, 0x00, 0x00})  // first sector 2048
	copy(entry[12:16], []byte{0x00, 0x00, 0x01, 0x00}) // 65536 sectors
	mbr[510], mbr[511] = 0x55, 0xaa
	mountertest.WriteAt(t, dev, mbr, 0)
}

// flush writes the device's cached blocks through to its backing file.
func flush(t *testing.T, dev string) {
	t.Helper()
	f, err := os.OpenFile(dev, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// checksum hashes the non-zero 4 KiB blocks of a sparse file with their
// offsets, so it changes exactly when the file's bytes change (holes and
// written zeros read alike) while reading only the regions holding data.
func checksum(t *testing.T, file string) string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	fd := int(f.Fd())
	block := make([]byte, 4096)
	zero := make([]byte, len(block))
	for off := int64(0); ; {
		start, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // no data after off
		}
		if err != nil {
			t.Fatal(err)
		}
		end, err := unix.Seek(fd, start, unix.SEEK_HOLE)
		if err != nil {
			t.Fatal(err)
		}
		for pos := start; pos < end; pos += int64(len(block)) {
			n, err := f.ReadAt(block, pos)
			if err != nil && !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
			if !bytes.Equal(block[:n], zero[:n]) {
				fmt.Fprintf(h, "@%d:", pos)
				h.Write(block[:n])
			}
		}
		off = end
	}
	return hex.EncodeToString(h.Sum(nil))
}

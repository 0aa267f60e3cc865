//go:build linux

package node_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/diskplane/diskplane/pkg/cloud/metadata"
	"github.com/diskplane/diskplane/pkg/driver/node"
	"github.com/diskplane/diskplane/pkg/mounter"
	"github.com/diskplane/diskplane/pkg/mounter/mountertest"
	"github.com/diskplane/diskplane/pkg/testutil"
)

const mib = 1 << 20

// realNode is a node service over this machine's kernel, with volumes as
// loop devices named and linked the way the EC2 emulator attaches them.
type realNode struct {
	t       *testing.T
	dir     string
	linkDir string
	svc     *node.Service
}

func newRealNode(t *testing.T) *realNode {
	t.Helper()
	testutil.RequireRoot(t, "losetup", "mkfs.ext4", "mkfs.xfs", "blkid", "resize2fs", "xfs_growfs", "df")
	dir := t.TempDir()
	n := &realNode{t: t, dir: dir, linkDir: filepath.Join(dir, "dev", "disk", "by-id")}
	m, err := mounter.New(mounter.Options{DeviceLinkDir: n.linkDir})
	if err != nil {
		t.Fatal(err)
	}
	in := &metadata.Instance{ID: "i-0123456789abcdef0", Type: "m5.large", Zone: "us-east-1a", NetworkInterfaces: 1}
	n.svc, err = node.New(node.Config{
		Metadata: func(context.Context) (*metadata.Instance, error) { return in, nil },
		Mounter:  m, ReservedVolumeAttachments: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// attach makes a volume appear on the node as an attached EBS volume would.
func (n *realNode) attach(sizeBytes int64) *mountertest.Volume {
	return mountertest.NewVolume(n.t, n.dir, n.linkDir, mountertest.NewVolumeID(n.t), sizeBytes)
}

// kubeletPaths returns the staging and target paths the kubelet would use
// for the volume, with the staging directory created as the kubelet does.
func (n *realNode) kubeletPaths(v *mountertest.Volume) (staging, target string) {
	n.t.Helper()
	staging = filepath.Join(n.dir, "plugins", v.ID, "globalmount")
	target = filepath.Join(n.dir, "pods", "pod-1", "volumes", v.ID, "mount")
	if err := os.MkdirAll(staging, 0o750); err != nil {
		n.t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		n.t.Fatal(err)
	}
	return staging, target
}

func (n *realNode) stage(v *mountertest.Volume, staging string, c *csi.VolumeCapability) error {
	_, err := n.svc.NodeStageVolume(context.Background(), &csi.NodeStageVolumeRequest{VolumeId: v.ID,
		StagingTargetPath: staging, VolumeCapability: c, PublishContext: map[string]string{"devicePath": "/dev/xvdba"}})
	return err
}

func (n *realNode) unstage(v *mountertest.Volume, staging string) {
	n.t.Helper()
	if _, err := n.svc.NodeUnstageVolume(context.Background(), &csi.NodeUnstageVolumeRequest{VolumeId: v.ID, StagingTargetPath: staging}); err != nil {
		n.t.Fatal(err)
	}
}

func (n *realNode) publish(v *mountertest.Volume, staging, target string, c *csi.VolumeCapability) {
	n.t.Helper()
	if _, err := n.svc.NodePublishVolume(context.Background(), &csi.NodePublishVolumeRequest{VolumeId: v.ID,
		StagingTargetPath: staging, TargetPath: target, VolumeCapability: c}); err != nil {
		n.t.Fatal(err)
	}
}

func (n *realNode) unpublish(v *mountertest.Volume, target string) {
	n.t.Helper()
	if _, err := n.svc.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: v.ID, TargetPath: target}); err != nil {
		n.t.Fatal(err)
	}
}

// assertNothingMounted checks the volume is mounted nowhere.
func assertNothingMounted(t *testing.T, v *mountertest.Volume) {
	t.Helper()
	if mounts := v.MountPoints(t); len(mounts) != 0 {
		t.Fatalf("volume %s still mounted at %v", v.ID, mounts)
	}
}

func mountCapability(fsType string) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fsType}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

func blockCapability() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

// TestVolumeLifecycle is the life of a volume on a node: stage (formatting
// it), publish, write, unpublish, unstage, then stage and publish again and
// find the data.
func TestVolumeLifecycle(t *testing.T) {
	for _, fsType := range []string{"ext4", "xfs"} {
		t.Run(fsType, func(t *testing.T) {
			n := newRealNode(t)
			v := n.attach(512 * mib)
			staging, target := n.kubeletPaths(v)
			c := mountCapability(fsType)

			if err := n.stage(v, staging, c); err != nil {
				t.Fatal(err)
			}
			if got := blkidType(t, v.Device); got != fsType {
				t.Fatalf("device formatted as %q, want %s", got, fsType)
			}
			n.publish(v, staging, target, c)
			if err := os.WriteFile(filepath.Join(target, "hello.txt"), []byte("still here"), 0o600); err != nil {
				t.Fatal(err)
			}
			n.unpublish(v, target)
			if _, err := os.Stat(target); !os.IsNotExist(err) {
				t.Fatalf("target path left after unpublish: %v", err)
			}
			n.unstage(v, staging)
			assertNothingMounted(t, v)

			if err := n.stage(v, staging, c); err != nil {
				t.Fatal(err)
			}
			n.publish(v, staging, target, c)
			if b, err := os.ReadFile(filepath.Join(target, "hello.txt")); err != nil || string(b) != "still here" {
				t.Fatalf("after staging again the file holds %q, %v", b, err)
			}
			n.unpublish(v, target)
			n.unstage(v, staging)
			assertNothingMounted(t, v)
		})
	}
}

// TestStagingAsAnotherFilesystemKeepsData stages a volume holding xfs as
// ext4: the request fails and the xfs filesystem and its file survive.
func TestStagingAsAnotherFilesystemKeepsData(t *testing.T) {
	n := newRealNode(t)
	v := n.attach(512 * mib)
	staging, _ := n.kubeletPaths(v)
	if err := n.stage(v, staging, mountCapability("xfs")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(staging, "precious"), []byte("xfs data"), 0o600); err != nil {
		t.Fatal(err)
	}
	n.unstage(v, staging)

	err := n.stage(v, staging, mountCapability("ext4"))
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("staging xfs as ext4 = %v, want FailedPrecondition", err)
	}
	assertNothingMounted(t, v)
	if got := blkidType(t, v.Device); got != "xfs" {
		t.Fatalf("device now holds %q, want xfs untouched", got)
	}
	if err := n.stage(v, staging, mountCapability("xfs")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(staging, "precious")); err != nil || string(b) != "xfs data" {
		t.Fatalf("xfs file holds %q, %v", b, err)
	}
	n.unstage(v, staging)
}

// TestDeviceOfAnotherVolumeIsRefused points a volume's by-id link at the
// loop device of another volume, as a stale link would: the node refuses to
// touch it.
func TestDeviceOfAnotherVolumeIsRefused(t *testing.T) {
	n := newRealNode(t)
	other := n.attach(64 * mib)
	victimID := mountertest.NewVolumeID(t)
	link := filepath.Join(n.linkDir, "nvme-Amazon_Elastic_Block_Store_"+strings.Replace(victimID, "-", "", 1))
	if err := os.Symlink(other.Device, link); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(link) })
	staging := filepath.Join(n.dir, "plugins", victimID, "globalmount")
	_, err := n.svc.NodeStageVolume(context.Background(), &csi.NodeStageVolumeRequest{VolumeId: victimID,
		StagingTargetPath: staging, VolumeCapability: mountCapability("ext4")})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), other.ID) {
		t.Fatalf("staging through another volume's device = %v, want FailedPrecondition naming %s", err, other.ID)
	}
	if got := blkidType(t, other.Device); got != "" {
		t.Fatalf("the other volume's device was formatted as %s", got)
	}
	assertNothingMounted(t, other)
}

// TestOnlineExpansion grows a published volume and expands its filesystem
// through NodeExpandVolume while it stays mounted.
func TestOnlineExpansion(t *testing.T) {
	for _, fsType := range []string{"ext4", "xfs"} {
		t.Run(fsType, func(t *testing.T) {
			n := newRealNode(t)
			if fsType == "ext4" {
				mountertest.RequireExt4OnlineResize(t)
			}
			v := n.attach(1024 * mib)
			staging, target := n.kubeletPaths(v)
			c := mountCapability(fsType)
			if err := n.stage(v, staging, c); err != nil {
				t.Fatal(err)
			}
			n.publish(v, staging, target, c)
			before := dfSize(t, target)

			v.Grow(t, 2048*mib)
			resp, err := n.svc.NodeExpandVolume(context.Background(), &csi.NodeExpandVolumeRequest{VolumeId: v.ID,
				VolumePath: target, StagingTargetPath: staging, VolumeCapability: c,
				CapacityRange: &csi.CapacityRange{RequiredBytes: 2048 * mib}})
			if err != nil {
				t.Fatal(err)
			}
			if resp.CapacityBytes != 2048*mib {
				t.Fatalf("NodeExpandVolume capacity = %d, want %d", resp.CapacityBytes, 2048*mib)
			}
			if after := dfSize(t, target); after < before+900*mib {
				t.Fatalf("filesystem is %d bytes after expansion, was %d; want about 1 GiB more", after, before)
			}
			n.unpublish(v, target)
			n.unstage(v, staging)
			assertNothingMounted(t, v)
		})
	}
}

// TestBlockVolume publishes a raw block volume and moves bytes through it.
func TestBlockVolume(t *testing.T) {
	n := newRealNode(t)
	v := n.attach(64 * mib)
	staging, target := n.kubeletPaths(v)
	if err := n.stage(v, staging, blockCapability()); err != nil {
		t.Fatal(err)
	}
	n.publish(v, staging, target, blockCapability())
	payload := []byte("raw block bytes")
	f, err := os.OpenFile(target, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(payload, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(payload))
	if _, err := f.ReadAt(got, 1<<20); err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("read back %q, %v", got, err)
	}
	_ = f.Close()
	backing, err := os.Open(v.File)
	if err != nil {
		t.Fatal(err)
	}
	defer backing.Close()
	onVolume := make([]byte, len(payload))
	if _, err := backing.ReadAt(onVolume, 1<<20); err != nil || !bytes.Equal(onVolume, payload) {
		t.Fatalf("the volume's file holds %q, %v; want the bytes written through the target", onVolume, err)
	}
	stats, err := n.svc.NodeGetVolumeStats(context.Background(), &csi.NodeGetVolumeStatsRequest{VolumeId: v.ID, VolumePath: target})
	if err != nil {
		t.Fatal(err)
	}
	if u := stats.Usage; len(u) != 1 || u[0].Total != 64*mib {
		t.Fatalf("block stats = %v, want total %d", u, 64*mib)
	}
	n.unpublish(v, target)
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Fatalf("block target file left after unpublish: %v", err)
	}
	n.unstage(v, staging)
}

// TestVolumeStatsMatchDF compares NodeGetVolumeStats with df.
func TestVolumeStatsMatchDF(t *testing.T) {
	n := newRealNode(t)
	v := n.attach(256 * mib)
	staging, target := n.kubeletPaths(v)
	c := mountCapability("ext4")
	if err := n.stage(v, staging, c); err != nil {
		t.Fatal(err)
	}
	n.publish(v, staging, target, c)
	if err := os.WriteFile(filepath.Join(target, "blob"), bytes.Repeat([]byte("x"), 5*mib), 0o600); err != nil {
		t.Fatal(err)
	}
	unix.Sync()
	resp, err := n.svc.NodeGetVolumeStats(context.Background(), &csi.NodeGetVolumeStatsRequest{VolumeId: v.ID, VolumePath: target})
	if err != nil {
		t.Fatal(err)
	}
	bytesDF := dfFields(t, target, "-B1", "--output=size,used,avail")
	inodesDF := dfFields(t, target, "--output=itotal,iused,iavail")
	for _, u := range resp.Usage {
		want := bytesDF
		if u.Unit == csi.VolumeUsage_INODES {
			want = inodesDF
		}
		if got := []int64{u.Total, u.Used, u.Available}; !slices.Equal(got, want) {
			t.Errorf("%s: NodeGetVolumeStats total/used/available = %v, df says %v", u.Unit, got, want)
		}
	}
	n.unpublish(v, target)
	if _, err := n.svc.NodeGetVolumeStats(context.Background(), &csi.NodeGetVolumeStatsRequest{VolumeId: v.ID, VolumePath: target}); status.Code(err) != codes.NotFound {
		t.Fatalf("stats of an unpublished path = %v, want NotFound", err)
	}
	n.unstage(v, staging)
}

func blkidType(t *testing.T, dev string) string {
	t.Helper()
	out, err := exec.Command("blkid", "-p", "-s", "TYPE", "-o", "value", dev).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 2 {
			return "" // nothing on the device
		}
		t.Fatalf("blkid %s: %v", dev, err)
	}
	return strings.TrimSpace(string(out))
}

func dfFields(t *testing.T, path string, args ...string) []int64 {
	t.Helper()
	out, err := exec.Command("df", append(args, path)...).Output()
	if err != nil {
		t.Fatalf("df: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var nums []int64
	for _, f := range strings.Fields(lines[len(lines)-1]) {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			t.Fatalf("df output %q: %v", out, err)
		}
		nums = append(nums, v)
	}
	return nums
}

func dfSize(t *testing.T, path string) int64 {
	return dfFields(t, path, "-B1", "--output=size")[0]
}

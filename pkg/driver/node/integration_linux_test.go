//go:build linux

package node_test

import (
	"bytes"
	"fmt"
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

	"github.com/diskplane/diskplane/pkg/mounter/mountertest"
)

const gib = 1 << 30

// TestVolumeLifecycle is the life of a volume on a node: attach, stage
// (formatting it), publish, write, unpublish, unstage, then stage and
// publish again and find the data; then detach and delete.
func TestVolumeLifecycle(t *testing.T) {
	for _, fsType := range []string{"ext4", "xfs"} {
		t.Run(fsType, func(t *testing.T) {
			n := newCloudNode(t)
			v := n.attachNew(1)
			staging, target := n.kubeletPaths(v)
			c := mountCapability(fsType)

			if err := n.stage(v, staging, c); err != nil {
				t.Fatal(err)
			}
			if got := blkidType(t, v.Link); got != fsType {
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

			if err := n.stage(v, staging, c); err != nil {
				t.Fatal(err)
			}
			n.publish(v, staging, target, c)
			if b, err := os.ReadFile(filepath.Join(target, "hello.txt")); err != nil || string(b) != "still here" {
				t.Fatalf("after staging again the file holds %q, %v", b, err)
			}
			n.unpublish(v, target)
			n.unstage(v, staging)
			n.detachAndDelete(v)
		})
	}
}

// TestNodeInfoFromTheInstance checks the node names itself after the
// instance the volumes are attached to.
func TestNodeInfoFromTheInstance(t *testing.T) {
	n := newCloudNode(t)
	resp, err := n.svc.NodeGetInfo(t.Context(), &csi.NodeGetInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	local := n.env.LocalInstance()
	if resp.NodeId != local.ID || resp.AccessibleTopology.Segments["topology.kubernetes.io/zone"] != local.Zone {
		t.Fatalf("NodeGetInfo = %+v, want instance %s in %s", resp, local.ID, local.Zone)
	}
	if resp.MaxVolumesPerNode < 1 || resp.MaxVolumesPerNode > 27 {
		t.Fatalf("MaxVolumesPerNode = %d for an m5.large", resp.MaxVolumesPerNode)
	}
}

// TestStagingAsAnotherFilesystemKeepsData stages a volume holding xfs as
// ext4: the request fails and the xfs filesystem and its file survive.
func TestStagingAsAnotherFilesystemKeepsData(t *testing.T) {
	n := newCloudNode(t)
	v := n.attachNew(1)
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
	if mounted := isMounted(t, staging); mounted {
		t.Fatal("staging path mounted after a refusal")
	}
	if got := blkidType(t, v.Link); got != "xfs" {
		t.Fatalf("device now holds %q, want xfs untouched", got)
	}
	if err := n.stage(v, staging, mountCapability("xfs")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(staging, "precious")); err != nil || string(b) != "xfs data" {
		t.Fatalf("xfs file holds %q, %v", b, err)
	}
	n.unstage(v, staging)
	n.detachAndDelete(v)
}

// TestDeviceOfAnotherVolumeIsRefused points the by-id link of a volume at
// the loop device of another, attached one, as a stale link would: the
// backing file names the other volume, so the node refuses to touch it.
func TestDeviceOfAnotherVolumeIsRefused(t *testing.T) {
	n := newCloudNode(t)
	other := n.attachNew(1)
	victim := volume{ID: mountertest.NewVolumeID(t)}
	link := filepath.Join(n.env.LinkDir, "nvme-Amazon_Elastic_Block_Store_"+strings.Replace(victim.ID, "-", "", 1))
	if err := os.Symlink(other.Link, link); err != nil {
		t.Fatal(err)
	}
	staging, _ := n.kubeletPaths(victim)
	err := n.stage(victim, staging, mountCapability("ext4"))
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), other.ID) {
		t.Fatalf("staging through another volume's device = %v, want FailedPrecondition naming %s", err, other.ID)
	}
	if got := blkidType(t, other.Link); got != "" {
		t.Fatalf("the other volume's device was formatted as %s", got)
	}
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	n.detachAndDelete(other)
}

// TestOnlineExpansion grows a mounted volume: after EC2's modification
// reaches the device, NodeExpandVolume grows the filesystem (and, on a
// volume encrypted on the node, first its LUKS mapping, which takes the
// node-expand secret's passphrase) while the pod keeps it mounted.
func TestOnlineExpansion(t *testing.T) {
	for _, encrypt := range []bool{false, true} {
		for _, fsType := range []string{"ext4", "xfs"} {
			t.Run(fmt.Sprintf("%s/encrypted=%v", fsType, encrypt), func(t *testing.T) {
				n := newCloudNode(t)
				if fsType == "ext4" {
					mountertest.RequireExt4OnlineResize(t)
				}
				if encrypt {
					requireLUKS(t)
				}
				v := n.attachNew(1)
				if encrypt {
					v = encrypted(v)
				}
				staging, target := n.kubeletPaths(v)
				c := mountCapability(fsType)
				if err := n.stage(v, staging, c); err != nil {
					t.Fatal(err)
				}
				n.publish(v, staging, target, c)
				before := dfFields(t, target, "-B1", "--output=size")[0]

				n.grow(v, 2)
				expand := &csi.NodeExpandVolumeRequest{VolumeId: v.ID, VolumePath: target, StagingTargetPath: staging,
					VolumeCapability: c, CapacityRange: &csi.CapacityRange{RequiredBytes: 2 * gib}}
				if encrypt {
					if _, err := n.svc.NodeExpandVolume(t.Context(), expand); status.Code(err) != codes.FailedPrecondition {
						t.Fatalf("NodeExpandVolume without the node-expand secret = %v, want FailedPrecondition", err)
					}
					expand.Secrets = luksSecrets
				}
				resp, err := n.svc.NodeExpandVolume(t.Context(), expand)
				if err != nil {
					t.Fatal(err)
				}
				if resp.CapacityBytes != 2*gib {
					t.Fatalf("NodeExpandVolume capacity = %d, want the volume's %d", resp.CapacityBytes, 2*gib)
				}
				if after := dfFields(t, target, "-B1", "--output=size")[0]; after < before+gib*9/10 {
					t.Fatalf("filesystem is %d bytes after expansion, was %d; want about 1 GiB more", after, before)
				}
				n.unpublish(v, target)
				n.unstage(v, staging)
				n.detachAndDelete(v)
			})
		}
	}
}

// TestGrowWhileDetached grows a volume while no node has it: staging it
// again grows its filesystem (and an encrypted volume's mapping, with the
// stage secret) to the new size. (xfs: growing a mounted ext4 needs a
// capability some test sandboxes drop; the step is the same.)
func TestGrowWhileDetached(t *testing.T) {
	for _, encrypt := range []bool{false, true} {
		t.Run(fmt.Sprintf("encrypted=%v", encrypt), func(t *testing.T) {
			n := newCloudNode(t)
			if encrypt {
				requireLUKS(t)
			}
			v := n.attachNew(1)
			if encrypt {
				v = encrypted(v)
			}
			staging, _ := n.kubeletPaths(v)
			c := mountCapability("xfs")
			if err := n.stage(v, staging, c); err != nil {
				t.Fatal(err)
			}
			before := dfFields(t, staging, "-B1", "--output=size")[0]
			n.unstage(v, staging)
			n.detach(v)
			n.grow(v, 2)
			n.attach(v)
			if err := n.stage(v, staging, c); err != nil {
				t.Fatal(err)
			}
			if after := dfFields(t, staging, "-B1", "--output=size")[0]; after < before+gib*9/10 {
				t.Fatalf("filesystem is %d bytes after staging the grown volume, was %d", after, before)
			}
			n.unstage(v, staging)
			n.detachAndDelete(v)
		})
	}
}

// TestBlockVolume publishes a raw block volume and moves bytes through it.
func TestBlockVolume(t *testing.T) {
	n := newCloudNode(t)
	v := n.attachNew(1)
	staging, target := n.kubeletPaths(v)
	if err := n.stage(v, staging, blockCapability()); err != nil {
		t.Fatal(err)
	}
	n.publish(v, staging, target, blockCapability())
	payload := []byte("raw block bytes")
	mountertest.WriteAt(t, target, payload, 1<<20)
	if got := mountertest.ReadAt(t, v.Link, len(payload), 1<<20); !bytes.Equal(got, payload) {
		t.Fatalf("the volume holds %q where %q was written through the target", got, payload)
	}
	mountertest.WriteAt(t, v.Link, []byte("and back"), 2<<20)
	if got := mountertest.ReadAt(t, target, len("and back"), 2<<20); string(got) != "and back" {
		t.Fatalf("read %q through the target", got)
	}
	stats, err := n.svc.NodeGetVolumeStats(t.Context(), &csi.NodeGetVolumeStatsRequest{VolumeId: v.ID, VolumePath: target})
	if err != nil {
		t.Fatal(err)
	}
	if u := stats.Usage; len(u) != 1 || u[0].Total != gib {
		t.Fatalf("block stats = %v, want total %d", u, gib)
	}
	n.unpublish(v, target)
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Fatalf("block target file left after unpublish: %v", err)
	}
	n.unstage(v, staging)
	n.detachAndDelete(v)
}

// TestVolumeStatsMatchDF compares NodeGetVolumeStats with df.
func TestVolumeStatsMatchDF(t *testing.T) {
	n := newCloudNode(t)
	v := n.attachNew(1)
	staging, target := n.kubeletPaths(v)
	c := mountCapability("ext4")
	if err := n.stage(v, staging, c); err != nil {
		t.Fatal(err)
	}
	n.publish(v, staging, target, c)
	if err := os.WriteFile(filepath.Join(target, "blob"), bytes.Repeat([]byte("x"), 5<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	unix.Sync()
	resp, err := n.svc.NodeGetVolumeStats(t.Context(), &csi.NodeGetVolumeStatsRequest{VolumeId: v.ID, VolumePath: target})
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
	_, err = n.svc.NodeGetVolumeStats(t.Context(), &csi.NodeGetVolumeStatsRequest{VolumeId: v.ID, VolumePath: target})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("stats of an unpublished path = %v, want NotFound", err)
	}
	n.unstage(v, staging)
	n.detachAndDelete(v)
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

func isMounted(t *testing.T, path string) bool {
	t.Helper()
	out, err := exec.Command("findmnt", "--noheadings", "--mountpoint", path).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 1 {
			return false
		}
		t.Fatalf("findmnt %s: %v", path, err)
	}
	return len(bytes.TrimSpace(out)) > 0
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

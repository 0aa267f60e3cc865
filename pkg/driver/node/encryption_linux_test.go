//go:build linux

package node_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/diskplane/diskplane/pkg/mounter/mountertest"
	"github.com/diskplane/diskplane/pkg/testutil"
)

var (
	luks2Context = map[string]string{"nodeEncryption": "luks2"}
	luksSecrets  = map[string]string{"luksPassphrase": "correct horse battery staple"}
)

// newEncryptedNode is newCloudNode on a kernel that can open LUKS (the node
// VM: make test-vm).
func newEncryptedNode(t *testing.T) *cloudNode {
	t.Helper()
	n := newCloudNode(t)
	requireLUKS(t)
	return n
}

// requireLUKS skips the test, loudly, unless this kernel can open LUKS
// volumes (the node VM's can: make test-vm runs it there).
func requireLUKS(t *testing.T) {
	t.Helper()
	testutil.RequireRoot(t, "cryptsetup")
	testutil.RequireKernelFeature(t, testutil.HasDeviceMapper(), "encrypted volumes need device-mapper (dm-crypt), which this kernel lacks")
}

// encrypted marks v as encrypted on the node with the test's passphrase.
func encrypted(v volume) volume {
	v.Context, v.Secrets = luks2Context, luksSecrets
	return v
}

// mappingPath is where the node's LUKS mapping of v appears.
func mappingPath(v volume) string { return "/dev/mapper/diskplane-" + v.ID }

// TestEncryptedVolumeLifecycle: a blank volume is formatted as LUKS2 on
// stage, its filesystem made on the mapping; unstage closes the mapping;
// staging again with the passphrase opens it and finds the data; a plugin
// restarted with the mapping open reuses it.
func TestEncryptedVolumeLifecycle(t *testing.T) {
	for _, fsType := range []string{"ext4", "xfs"} {
		t.Run(fsType, func(t *testing.T) {
			n := newEncryptedNode(t)
			v := encrypted(n.attachNew(1))
			staging, target := n.kubeletPaths(v)
			c := mountCapability(fsType)
			if err := n.stage(v, staging, c); err != nil {
				t.Fatal(err)
			}
			if got := blkidType(t, v.Link); got != "crypto_LUKS" {
				t.Fatalf("the volume holds %q, want a LUKS header", got)
			}
			if got := blkidType(t, mappingPath(v)); got != fsType {
				t.Fatalf("the mapping holds %q, want %s", got, fsType)
			}
			n.publish(v, staging, target, c)
			if err := os.WriteFile(filepath.Join(target, "secret.txt"), []byte("only with the key"), 0o600); err != nil {
				t.Fatal(err)
			}
			n.syncFS(target)
			if deviceContains(t, v.Link, []byte("only with the key")) {
				t.Fatal("the plaintext is on the device")
			}
			n.unpublish(v, target)
			n.unstage(v, staging)
			if _, err := os.Lstat(mappingPath(v)); !os.IsNotExist(err) {
				t.Fatalf("the mapping is still open after unstage: %v", err)
			}

			if err := n.stage(v, staging, c); err != nil {
				t.Fatal(err)
			}
			n.svc = n.newService() // the plugin restarts with the mapping open
			if err := n.stage(v, staging, c); err != nil {
				t.Fatalf("stage after a restart: %v", err)
			}
			n.publish(v, staging, target, c)
			if b, err := os.ReadFile(filepath.Join(target, "secret.txt")); err != nil || string(b) != "only with the key" {
				t.Fatalf("after staging again the file holds %q, %v", b, err)
			}
			n.unpublish(v, target)
			n.unstage(v, staging)
			n.detachAndDelete(v)
		})
	}
}

// TestEncryptedWrongPassphrase: a passphrase no key slot takes is
// PermissionDenied, nothing is mounted and the header stays as it was.
func TestEncryptedWrongPassphrase(t *testing.T) {
	n := newEncryptedNode(t)
	v := encrypted(n.attachNew(1))
	staging, _ := n.kubeletPaths(v)
	if err := n.stage(v, staging, mountCapability("ext4")); err != nil {
		t.Fatal(err)
	}
	n.unstage(v, staging)
	header := mountertest.ReadAt(t, v.Link, 1<<20, 0)
	wrong := v
	wrong.Secrets = map[string]string{"luksPassphrase": "not it"}
	err := n.stage(wrong, staging, mountCapability("ext4"))
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("stage with a wrong passphrase = %v, want PermissionDenied", err)
	}
	if isMounted(t, staging) {
		t.Fatal("mounted after a refusal")
	}
	if !bytes.Equal(mountertest.ReadAt(t, v.Link, 1<<20, 0), header) {
		t.Fatal("the LUKS header changed")
	}
	if err := n.stage(v, staging, mountCapability("ext4")); err != nil {
		t.Fatalf("the right passphrase after a wrong one: %v", err)
	}
	n.unstage(v, staging)
	n.detachAndDelete(v)
}

// TestEncryptedBlockVolume publishes the mapping of an encrypted raw block
// volume: what the pod writes reaches the device encrypted, and grows with
// the node-expand secret.
func TestEncryptedBlockVolume(t *testing.T) {
	n := newEncryptedNode(t)
	v := encrypted(n.attachNew(1))
	staging, target := n.kubeletPaths(v)
	c := blockCapability()
	if err := n.stage(v, staging, c); err != nil {
		t.Fatal(err)
	}
	n.publish(v, staging, target, c)
	payload := []byte("raw block bytes, encrypted")
	mountertest.WriteAt(t, target, payload, 1<<20)
	if got := mountertest.ReadAt(t, mappingPath(v), len(payload), 1<<20); !bytes.Equal(got, payload) {
		t.Fatalf("the mapping holds %q where %q was written through the target", got, payload)
	}
	if deviceContains(t, v.Link, payload) {
		t.Fatal("the plaintext is on the device")
	}
	n.grow(v, 2)
	resp, err := n.svc.NodeExpandVolume(t.Context(), &csi.NodeExpandVolumeRequest{VolumeId: v.ID, VolumePath: target,
		VolumeCapability: c, Secrets: luksSecrets})
	if err != nil || resp.CapacityBytes != 2*gib {
		t.Fatalf("NodeExpandVolume = %v, %v", resp, err)
	}
	stats, err := n.svc.NodeGetVolumeStats(t.Context(), &csi.NodeGetVolumeStatsRequest{VolumeId: v.ID, VolumePath: target})
	if err != nil || stats.Usage[0].Total < 2*gib-32<<20 {
		t.Fatalf("block stats after growing = %v, %v; want the grown mapping", stats, err)
	}
	n.unpublish(v, target)
	n.unstage(v, staging)
	if err := n.stage(v, staging, c); err != nil {
		t.Fatal(err)
	}
	n.publish(v, staging, target, c)
	if got := mountertest.ReadAt(t, target, len(payload), 1<<20); !bytes.Equal(got, payload) {
		t.Fatalf("after staging again the volume holds %q", got)
	}
	n.unpublish(v, target)
	n.unstage(v, staging)
	n.detachAndDelete(v)
}

// TestEncryptedSnapshotRestore: a volume restored from a snapshot of an
// encrypted volume holds the same LUKS header, so it opens with the same
// passphrase (its StorageClass must name a secret holding it) and with no
// other.
func TestEncryptedSnapshotRestore(t *testing.T) {
	n := newEncryptedNode(t)
	v := encrypted(n.attachNew(1))
	staging, _ := n.kubeletPaths(v)
	c := mountCapability("ext4")
	if err := n.stage(v, staging, c); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(staging, "before-snapshot"), []byte("restored"), 0o600); err != nil {
		t.Fatal(err)
	}
	n.unstage(v, staging) // flushes the filesystem and closes the mapping
	snap, err := n.ec2.CreateSnapshot(t.Context(), &ec2.CreateSnapshotInput{VolumeId: aws.String(v.ID)})
	if err != nil {
		t.Fatal(err)
	}
	n.waitSnapshot(aws.ToString(snap.SnapshotId))
	out, err := n.ec2.CreateVolume(t.Context(), &ec2.CreateVolumeInput{AvailabilityZone: aws.String(n.env.Zone()),
		SnapshotId: snap.SnapshotId, VolumeType: types.VolumeTypeGp3})
	if err != nil {
		t.Fatal(err)
	}
	restored := encrypted(volume{ID: aws.ToString(out.VolumeId), DevicePath: "/dev/xvdbb"})
	restored.Link = n.linkOf(restored.ID)
	n.waitAvailable(restored.ID)
	n.attach(restored)
	rStaging, _ := n.kubeletPaths(restored)
	other := restored
	other.Secrets = map[string]string{"luksPassphrase": "a new claim's own secret"}
	if err := n.stage(other, rStaging, c); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("restore staged with another passphrase = %v, want PermissionDenied", err)
	}
	if err := n.stage(restored, rStaging, c); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(rStaging, "before-snapshot")); err != nil || string(b) != "restored" {
		t.Fatalf("the restored volume holds %q, %v", b, err)
	}
	n.unstage(restored, rStaging)
	n.detachAndDelete(restored)
	n.detachAndDelete(v)
	if _, err := n.ec2.DeleteSnapshot(t.Context(), &ec2.DeleteSnapshotInput{SnapshotId: snap.SnapshotId}); err != nil {
		t.Fatal(err)
	}
}

// deviceContains reports whether needle appears anywhere on a device,
// reading it a MiB at a time.
func deviceContains(t *testing.T, dev string, needle []byte) bool {
	t.Helper()
	f, err := os.Open(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20+len(needle))
	for off := int64(0); ; off += 1 << 20 {
		n, err := f.ReadAt(buf, off)
		if bytes.Contains(buf[:n], needle) {
			return true
		}
		if err != nil {
			return false
		}
	}
}

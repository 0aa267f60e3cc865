//go:build linux

package node_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"

	"github.com/diskplane/diskplane/pkg/cloud/metadata"
	"github.com/diskplane/diskplane/pkg/driver/node"
	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/mounter"
	"github.com/diskplane/diskplane/pkg/testutil"
)

// cloudNode is this machine playing an EC2 instance of the emulator: volumes
// are created and attached through the EC2 API and appear as loop devices
// with by-id links, and the node service learns who it is from the
// emulator's IMDS, as on a real instance.
type cloudNode struct {
	t      *testing.T
	env    *emulatortest.Env
	ec2    *ec2.Client
	svc    *node.Service
	dir    string
	mounts []string // paths the test may leave mounted if it fails
}

func newCloudNode(t *testing.T) *cloudNode { return newCloudNodeIn(t, "") }

// newCloudNodeIn is newCloudNode with the emulator's volume images in
// dataDir ("": a temporary directory).
func newCloudNodeIn(t *testing.T, dataDir string) *cloudNode {
	t.Helper()
	testutil.RequireRoot(t, "losetup", "mkfs.ext4", "mkfs.xfs", "blkid", "resize2fs", "xfs_growfs", "df", "findmnt")
	env := emulatortest.Start(t, emulatortest.Options{Devices: true, DataDir: dataDir})
	n := &cloudNode{t: t, env: env, ec2: env.EC2Client(), dir: t.TempDir()}
	n.svc = n.newService()
	// Runs before the emulator's teardown: a failed test must not leave
	// mounts that keep its loop devices busy.
	t.Cleanup(func() {
		for i := len(n.mounts) - 1; i >= 0; i-- {
			for unix.Unmount(n.mounts[i], unix.MNT_DETACH) == nil {
				t.Errorf("%s was still mounted when the test ended", n.mounts[i])
			}
		}
	})
	return n
}

// newService builds a node service over this node, as a (re)started plugin
// does; configure adds to its configuration. LUKS2 headers it writes derive
// at Argon2id's least fixed cost: the tests format many, and tuning the
// cost takes seconds under the node VM's emulation.
func (n *cloudNode) newService(configure ...func(*node.Config)) *node.Service {
	t, env := n.t, n.env
	t.Helper()
	m, err := mounter.New(mounter.Options{DeviceLinkDir: env.LinkDir, EmulatorLoopDevices: true,
		LUKSPBKDFMemoryKiB: 8 << 10, LUKSPBKDFIterations: 4})
	if err != nil {
		t.Fatal(err)
	}
	cfg := node.Config{
		Metadata: func(ctx context.Context) (*metadata.Instance, error) {
			return metadata.Get(ctx, metadata.Options{Sources: []string{metadata.SourceIMDS}, IMDSEndpoint: env.IMDSURL})
		},
		Mounter:                   m,
		ReservedVolumeAttachments: -1,
	}
	for _, c := range configure {
		c(&cfg)
	}
	svc, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// volume is one emulated EBS volume attached to this node.
type volume struct {
	ID         string
	DevicePath string // the attachment's device name, as the controller passes it
	Link       string // the by-id link the emulator made
	// Context and Secrets go into the volume's stage (and publish) requests:
	// a volume context from CreateVolume, the node-stage secret.
	Context, Secrets map[string]string
}

// attachNew creates a volume of sizeGiB and attaches it to this node.
func (n *cloudNode) attachNew(sizeGiB int32) volume {
	n.t.Helper()
	out, err := n.ec2.CreateVolume(n.t.Context(), &ec2.CreateVolumeInput{AvailabilityZone: aws.String(n.env.Zone()),
		Size: aws.Int32(sizeGiB), VolumeType: types.VolumeTypeGp3})
	if err != nil {
		n.t.Fatalf("CreateVolume: %v", err)
	}
	v := volume{ID: aws.ToString(out.VolumeId), DevicePath: "/dev/xvdba"}
	n.attach(v)
	v.Link = n.linkOf(v.ID)
	return v
}

// linkOf is the by-id link the emulator makes for an attached volume.
func (n *cloudNode) linkOf(volumeID string) string {
	return filepath.Join(n.env.LinkDir, "nvme-Amazon_Elastic_Block_Store_"+strings.Replace(volumeID, "-", "", 1))
}

// waitAvailable polls DescribeVolumes until a new volume is available.
func (n *cloudNode) waitAvailable(id string) {
	n.t.Helper()
	for i := 0; ; i++ {
		out, err := n.ec2.DescribeVolumes(n.t.Context(), &ec2.DescribeVolumesInput{VolumeIds: []string{id}})
		if err == nil && len(out.Volumes) == 1 && out.Volumes[0].State == types.VolumeStateAvailable {
			return
		}
		if i == 10000 {
			n.t.Fatalf("volume %s never became available: %v", id, err)
		}
	}
}

// waitSnapshot polls DescribeSnapshots until a snapshot is completed.
func (n *cloudNode) waitSnapshot(id string) {
	n.t.Helper()
	for i := 0; ; i++ {
		out, err := n.ec2.DescribeSnapshots(n.t.Context(), &ec2.DescribeSnapshotsInput{SnapshotIds: []string{id}})
		if err == nil && len(out.Snapshots) == 1 && out.Snapshots[0].State == types.SnapshotStateCompleted {
			return
		}
		if i == 10000 {
			n.t.Fatalf("snapshot %s never completed: %v", id, err)
		}
	}
}

// attach attaches an existing volume to this node again.
func (n *cloudNode) attach(v volume) {
	n.t.Helper()
	if _, err := n.ec2.AttachVolume(n.t.Context(), &ec2.AttachVolumeInput{VolumeId: aws.String(v.ID),
		InstanceId: aws.String(n.env.LocalInstance().ID), Device: aws.String(v.DevicePath)}); err != nil {
		n.t.Fatalf("AttachVolume: %v", err)
	}
	n.waitAttachment(v.ID, types.VolumeAttachmentStateAttached)
}

// detach detaches the volume from this node.
func (n *cloudNode) detach(v volume) {
	n.t.Helper()
	if _, err := n.ec2.DetachVolume(n.t.Context(), &ec2.DetachVolumeInput{VolumeId: aws.String(v.ID)}); err != nil {
		n.t.Fatalf("DetachVolume: %v", err)
	}
	n.waitAttachment(v.ID, types.VolumeAttachmentStateDetached)
}

// detachAndDelete detaches the volume (which waits while it is still
// mounted, as EC2 does) and deletes it, and checks nothing is left of it.
func (n *cloudNode) detachAndDelete(v volume) {
	n.t.Helper()
	device, err := filepath.EvalSymlinks(v.Link)
	if err != nil {
		n.t.Fatal(err)
	}
	n.detach(v)
	if _, err := n.ec2.DeleteVolume(n.t.Context(), &ec2.DeleteVolumeInput{VolumeId: aws.String(v.ID)}); err != nil {
		n.t.Fatalf("DeleteVolume: %v", err)
	}
	if _, err := os.Lstat(v.Link); !os.IsNotExist(err) {
		n.t.Fatalf("by-id link of %s left after detach: %v", v.ID, err)
	}
	if !loopReleased(device, v.ID) {
		n.t.Fatalf("loop device %s still backs %s after detach", device, v.ID)
	}
}

// loopReleased reports whether the loop device no longer backs the volume,
// allowing a few seconds: a detach of a device another process still holds
// open (udev's probe of the change, in the node VM) marks it autoclear, and
// the kernel releases it on that process's last close.
func loopReleased(device, volumeID string) bool {
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _ := exec.Command("losetup", "--noheadings", "--output", "BACK-FILE", device).Output()
		if !strings.Contains(string(out), volumeID) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitAttachment polls DescribeVolumes until the volume's attachment is in
// state (detached: gone). The emulator's state changes are instant, so a
// few polls suffice; the bound only stops a broken emulator.
func (n *cloudNode) waitAttachment(id string, state types.VolumeAttachmentState) {
	n.t.Helper()
	for i := 0; ; i++ {
		out, err := n.ec2.DescribeVolumes(n.t.Context(), &ec2.DescribeVolumesInput{VolumeIds: []string{id}})
		if err != nil {
			n.t.Fatal(err)
		}
		got := types.VolumeAttachmentStateDetached
		if a := out.Volumes[0].Attachments; len(a) > 0 {
			got = a[0].State
		}
		if got == state {
			return
		}
		if i == 10000 {
			n.t.Fatalf("volume %s is %s, waited for %s", id, got, state)
		}
	}
}

// grow raises the volume to sizeGiB with ModifyVolume and waits until the
// modification reaches optimizing, when the new size is usable.
func (n *cloudNode) grow(v volume, sizeGiB int32) {
	n.t.Helper()
	ctx := n.t.Context()
	if _, err := n.ec2.ModifyVolume(ctx, &ec2.ModifyVolumeInput{VolumeId: aws.String(v.ID), Size: aws.Int32(sizeGiB)}); err != nil {
		n.t.Fatalf("ModifyVolume: %v", err)
	}
	for i := 0; ; i++ {
		out, err := n.ec2.DescribeVolumesModifications(ctx, &ec2.DescribeVolumesModificationsInput{VolumeIds: []string{v.ID}})
		if err != nil {
			n.t.Fatal(err)
		}
		if s := out.VolumesModifications[0].ModificationState; s == types.VolumeModificationStateOptimizing || s == types.VolumeModificationStateCompleted {
			return
		}
		if i == 10000 {
			n.t.Fatal("the modification never reached optimizing")
		}
	}
}

// kubeletPaths returns the staging and target paths the kubelet would use
// for the volume, with the staging directory created as the kubelet does.
func (n *cloudNode) kubeletPaths(v volume) (staging, target string) {
	n.t.Helper()
	staging = filepath.Join(n.dir, "plugins", v.ID, "globalmount")
	target = filepath.Join(n.dir, "pods", "pod-1", "volumes", v.ID, "mount")
	for _, d := range []string{staging, filepath.Dir(target)} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			n.t.Fatal(err)
		}
	}
	n.mounts = append(n.mounts, staging, target)
	return staging, target
}

func (n *cloudNode) stage(v volume, staging string, c *csi.VolumeCapability) error {
	_, err := n.svc.NodeStageVolume(n.t.Context(), &csi.NodeStageVolumeRequest{VolumeId: v.ID, StagingTargetPath: staging,
		VolumeCapability: c, PublishContext: map[string]string{"devicePath": v.DevicePath}, VolumeContext: v.Context, Secrets: v.Secrets})
	return err
}

func (n *cloudNode) unstage(v volume, staging string) {
	n.t.Helper()
	if _, err := n.svc.NodeUnstageVolume(n.t.Context(), &csi.NodeUnstageVolumeRequest{VolumeId: v.ID, StagingTargetPath: staging}); err != nil {
		n.t.Fatal(err)
	}
}

func (n *cloudNode) publish(v volume, staging, target string, c *csi.VolumeCapability) {
	n.t.Helper()
	if _, err := n.svc.NodePublishVolume(n.t.Context(), &csi.NodePublishVolumeRequest{VolumeId: v.ID, StagingTargetPath: staging,
		TargetPath: target, VolumeCapability: c, PublishContext: map[string]string{"devicePath": v.DevicePath}, VolumeContext: v.Context}); err != nil {
		n.t.Fatal(err)
	}
}

func (n *cloudNode) unpublish(v volume, target string) {
	n.t.Helper()
	if _, err := n.svc.NodeUnpublishVolume(n.t.Context(), &csi.NodeUnpublishVolumeRequest{VolumeId: v.ID, TargetPath: target}); err != nil {
		n.t.Fatal(err)
	}
}

// syncFS writes the filesystem mounted at path through to its device.
func (n *cloudNode) syncFS(path string) {
	n.t.Helper()
	f, err := os.Open(path)
	if err != nil {
		n.t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		n.t.Fatal(err)
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

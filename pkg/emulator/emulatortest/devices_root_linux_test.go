//go:build linux

package emulatortest_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"golang.org/x/sys/unix"

	"github.com/diskplane/diskplane/pkg/emulator/disks"
	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/testutil"
)

// deviceFixture drives an emulator with real loop devices.
type deviceFixture struct {
	env    *emulatortest.Env
	client *ec2.Client
	t      *testing.T
}

func newDeviceFixture(t *testing.T) *deviceFixture {
	testutil.RequireRoot(t, "mkfs.xfs", "xfs_growfs")
	env := emulatortest.Start(t, emulatortest.Options{Devices: true})
	return &deviceFixture{env: env, client: env.EC2Client(), t: t}
}

func (f *deviceFixture) createVolume(in *ec2.CreateVolumeInput) string {
	f.t.Helper()
	in.AvailabilityZone = aws.String(f.env.Zone())
	out, err := f.client.CreateVolume(f.t.Context(), in)
	if err != nil {
		f.t.Fatalf("CreateVolume: %v", err)
	}
	return aws.ToString(out.VolumeId)
}

// attach attaches a volume to the local instance, waits for "attached" and
// returns the by-id link, which must exist by then.
func (f *deviceFixture) attach(id, device string) string {
	f.t.Helper()
	if _, err := f.client.AttachVolume(f.t.Context(), &ec2.AttachVolumeInput{VolumeId: aws.String(id),
		InstanceId: aws.String(f.env.LocalInstance().ID), Device: aws.String(device)}); err != nil {
		f.t.Fatalf("AttachVolume: %v", err)
	}
	f.waitAttachment(id, types.VolumeAttachmentStateAttached)
	link := filepath.Join(f.env.LinkDir, disks.LinkName(id))
	target, err := filepath.EvalSymlinks(link)
	if err != nil || !strings.HasPrefix(target, "/dev/loop") {
		f.t.Fatalf("by-id link of an attached volume: %s → %s, %v", link, target, err)
	}
	return link
}

// waitAttachment polls DescribeVolumes until the volume's attachment is in
// state ("detached": gone).
func (f *deviceFixture) waitAttachment(id string, state types.VolumeAttachmentState) {
	f.t.Helper()
	for i := 0; ; i++ {
		got := f.attachmentState(id)
		if got == state {
			return
		}
		if i == 10000 {
			f.t.Fatalf("volume %s is %s, waited for %s", id, got, state)
		}
	}
}

func (f *deviceFixture) attachmentState(id string) types.VolumeAttachmentState {
	f.t.Helper()
	out, err := f.client.DescribeVolumes(f.t.Context(), &ec2.DescribeVolumesInput{VolumeIds: []string{id}})
	if err != nil {
		f.t.Fatal(err)
	}
	if len(out.Volumes[0].Attachments) == 0 {
		return types.VolumeAttachmentStateDetached
	}
	return out.Volumes[0].Attachments[0].State
}

func (f *deviceFixture) detach(id string) {
	f.t.Helper()
	if _, err := f.client.DetachVolume(f.t.Context(), &ec2.DetachVolumeInput{VolumeId: aws.String(id)}); err != nil {
		f.t.Fatalf("DetachVolume: %v", err)
	}
	f.waitAttachment(id, types.VolumeAttachmentStateDetached)
}

// snapshot takes a snapshot and waits until it is completed.
func (f *deviceFixture) snapshot(vol string) string {
	f.t.Helper()
	out, err := f.client.CreateSnapshot(f.t.Context(), &ec2.CreateSnapshotInput{VolumeId: aws.String(vol)})
	if err != nil {
		f.t.Fatal(err)
	}
	id := aws.ToString(out.SnapshotId)
	for i := 0; ; i++ {
		if i == 10000 {
			f.t.Fatalf("snapshot %s never completed", id)
		}
		got, err := f.client.DescribeSnapshots(f.t.Context(), &ec2.DescribeSnapshotsInput{SnapshotIds: []string{id}})
		if err != nil {
			f.t.Fatal(err)
		}
		if got.Snapshots[0].State == types.SnapshotStateCompleted {
			return id
		}
	}
}

const dataOffset = 3 << 20

func writeAt(t *testing.T, path string, data []byte) {
	t.Helper()
	dev, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if _, err := dev.WriteAt(data, dataOffset); err != nil {
		t.Fatal(err)
	}
	if err := dev.Sync(); err != nil {
		t.Fatal(err)
	}
}

func readAt(t *testing.T, path string, n int) []byte {
	t.Helper()
	dev, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	buf := make([]byte, n)
	if _, err := dev.ReadAt(buf, dataOffset); err != nil {
		t.Fatal(err)
	}
	return buf
}

func TestSnapshotRestoreAcrossRestart(t *testing.T) {
	f := newDeviceFixture(t)
	data := bytes.Repeat([]byte("diskplane emulator "), 1000)

	src := f.createVolume(&ec2.CreateVolumeInput{Size: aws.Int32(1), VolumeType: types.VolumeTypeGp3})
	link := f.attach(src, "/dev/xvdba")
	writeAt(t, link, data)

	// Kill the emulator mid-way: the attachment, its device and the bytes
	// must all be there after the restart.
	f.env.Restart(t)
	if got := f.attachmentState(src); got != types.VolumeAttachmentStateAttached {
		t.Fatalf("attachment after restart: %s", got)
	}
	if got := readAt(t, link, len(data)); !bytes.Equal(got, data) {
		t.Fatal("the device lost its bytes across the restart")
	}
	dev, err := filepath.EvalSymlinks(link)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range f.env.Cloud().Volumes() {
		if v.ID == src && v.Attachments[0].HostDevice != dev {
			t.Fatalf("the admin view names %s after the restart, the link points at %s", v.Attachments[0].HostDevice, dev)
		}
	}

	snap := f.snapshot(src)
	restored := f.createVolume(&ec2.CreateVolumeInput{SnapshotId: aws.String(snap), Size: aws.Int32(2)})
	restoredLink := f.attach(restored, "/dev/xvdbb")
	if got := readAt(t, restoredLink, len(data)); !bytes.Equal(got, data) {
		t.Fatal("the volume restored from the snapshot does not hold the snapshot's bytes")
	}
	if size := deviceSize(t, restoredLink); size != 2<<30 {
		t.Fatalf("restored device is %d bytes, want 2 GiB", size)
	}
	clone, err := f.client.CopyVolumes(t.Context(), &ec2.CopyVolumesInput{SourceVolumeId: aws.String(src)})
	if err != nil {
		t.Fatal(err)
	}
	cloneLink := f.attach(aws.ToString(clone.Volumes[0].VolumeId), "/dev/xvdbc")
	if got := readAt(t, cloneLink, len(data)); !bytes.Equal(got, data) {
		t.Fatal("the copy does not hold the source's bytes")
	}

	for _, id := range []string{src, restored, aws.ToString(clone.Volumes[0].VolumeId)} {
		f.detach(id)
		if _, err := os.Lstat(filepath.Join(f.env.LinkDir, disks.LinkName(id))); !os.IsNotExist(err) {
			t.Fatalf("by-id link of detached %s: %v", id, err)
		}
		if _, err := f.client.DeleteVolume(t.Context(), &ec2.DeleteVolumeInput{VolumeId: aws.String(id)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.client.DeleteSnapshot(t.Context(), &ec2.DeleteSnapshotInput{SnapshotId: aws.String(snap)}); err != nil {
		t.Fatal(err)
	}
	f.assertNothingLeft()
}

func TestGrowMountedFilesystem(t *testing.T) {
	f := newDeviceFixture(t)
	id := f.createVolume(&ec2.CreateVolumeInput{Size: aws.Int32(1), VolumeType: types.VolumeTypeGp3})
	link := f.attach(id, "/dev/xvdba")
	dev, err := filepath.EvalSymlinks(link)
	if err != nil {
		t.Fatal(err)
	}
	// XFS, because growing it online needs only CAP_SYS_ADMIN, while ext4's
	// online resize also needs CAP_SYS_RESOURCE, which some containers drop.
	run(t, "mkfs.xfs", "-q", "-f", dev)
	mnt := t.TempDir()
	if err := unix.Mount(dev, mnt, "xfs", 0, ""); err != nil {
		t.Fatalf("mount: %v", err)
	}
	mounted := true
	t.Cleanup(func() {
		if mounted {
			_ = unix.Unmount(mnt, unix.MNT_DETACH)
		}
	})
	before := fsSize(t, mnt)

	if _, err := f.client.ModifyVolume(t.Context(), &ec2.ModifyVolumeInput{VolumeId: aws.String(id), Size: aws.Int32(2)}); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if i == 10000 {
			t.Fatal("the modification never reached optimizing")
		}
		out, err := f.client.DescribeVolumesModifications(t.Context(), &ec2.DescribeVolumesModificationsInput{VolumeIds: []string{id}})
		if err != nil {
			t.Fatal(err)
		}
		if s := out.VolumesModifications[0].ModificationState; s == types.VolumeModificationStateOptimizing || s == types.VolumeModificationStateCompleted {
			break
		}
	}
	if size := deviceSize(t, link); size != 2<<30 {
		t.Fatalf("device is %d bytes after growing to 2 GiB", size)
	}
	run(t, "xfs_growfs", mnt)
	if after := fsSize(t, mnt); after <= before+(512<<20) {
		t.Fatalf("filesystem is %d bytes after an online grow, was %d", after, before)
	}

	// A mounted device keeps the detach waiting, as a busy volume does on EC2.
	if _, err := f.client.DetachVolume(t.Context(), &ec2.DetachVolumeInput{VolumeId: aws.String(id)}); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if got := f.attachmentState(id); got != types.VolumeAttachmentStateDetaching {
			t.Fatalf("detach of a mounted device: %s, want detaching", got)
		}
	}
	if err := unix.Unmount(mnt, 0); err != nil {
		t.Fatal(err)
	}
	mounted = false
	f.waitAttachment(id, types.VolumeAttachmentStateDetached)
	if _, err := f.client.DeleteVolume(t.Context(), &ec2.DeleteVolumeInput{VolumeId: aws.String(id)}); err != nil {
		t.Fatal(err)
	}
	f.assertNothingLeft()
}

// assertNothingLeft checks that no by-id link and no loop device of the
// emulator's images remain.
func (f *deviceFixture) assertNothingLeft() {
	f.t.Helper()
	// Deleting completes at the next look.
	if _, err := f.client.DescribeVolumes(f.t.Context(), &ec2.DescribeVolumesInput{}); err != nil {
		f.t.Fatal(err)
	}
	links, err := os.ReadDir(f.env.LinkDir)
	if err != nil {
		f.t.Fatal(err)
	}
	if len(links) != 0 {
		f.t.Fatalf("links left behind: %v", links)
	}
	dataDir, err := filepath.EvalSymlinks(f.env.DataDir)
	if err != nil {
		f.t.Fatal(err)
	}
	backing, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, b := range backing {
		content, err := os.ReadFile(b)
		if err == nil && strings.HasPrefix(string(content), dataDir) {
			f.t.Fatalf("loop device left behind: %s → %s", b, content)
		}
	}
	images, _ := filepath.Glob(filepath.Join(f.env.DataDir, "volumes", "*"))
	var left []string
	for _, img := range images {
		if !strings.Contains(img, "vol-") {
			continue
		}
		left = append(left, filepath.Base(img))
	}
	// Only the root volume's image stays: the instance still runs.
	if len(left) != 1 {
		f.t.Fatalf("volume images left: %v", left)
	}
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// deviceSize reads a block device's size from sysfs.
func deviceSize(t *testing.T, link string) int64 {
	t.Helper()
	dev, err := filepath.EvalSymlinks(link)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join("/sys/class/block", filepath.Base(dev), "size"))
	if err != nil {
		t.Fatal(err)
	}
	sectors, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return sectors * 512
}

// fsSize is a mounted filesystem's size in bytes.
func fsSize(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Blocks) * st.Bsize
}

package model

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/diskplane/diskplane/pkg/emulator/disks"
	"github.com/diskplane/diskplane/pkg/testutil"
)

// TestViewedInstancesShareAMultiAttachedDevice plays two instances through
// views with real loop devices: a multi-attached io2 volume gets one device,
// linked in both instances' directories; detaching it from one withdraws only
// that link and keeps the device for the other; a restart re-exposes a lost
// link and withdraws a stale one; the last detach unbinds the device.
func TestViewedInstancesShareAMultiAttachedDevice(t *testing.T) {
	testutil.RequireRoot(t, "losetup")
	dataDir, hostLinks := t.TempDir(), t.TempDir()
	links := map[string]string{"i-0000000000000000a": t.TempDir(), "i-0000000000000000b": t.TempDir()}
	store, err := disks.NewLoopStore(dataDir, hostLinks)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Store: store, DataDir: dataDir, Instances: []InstanceSpec{
		{ID: "i-0000000000000000a", PrivateIP: "10.89.0.11", View: &disks.View{LinkDir: links["i-0000000000000000a"]}},
		{ID: "i-0000000000000000b", PrivateIP: "10.89.0.12", View: &disks.View{LinkDir: links["i-0000000000000000b"]}},
	}}
	start := func() *Cloud {
		c, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := start()
	t.Cleanup(func() { _ = c.Close() })
	iops, multi := int32(100), true
	v, err := c.CreateVolume(CreateVolumeInput{Zone: "us-east-1a", Size: 4, Type: "io2", Iops: &iops, MultiAttach: &multi})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Detach(v.ID, true) })
	linkOf := func(instanceID string) string {
		target, err := os.Readlink(filepath.Join(links[instanceID], disks.LinkName(v.ID)))
		if err != nil {
			return ""
		}
		return target
	}
	settle := func(c *Cloud) Volume {
		t.Helper()
		page, err := c.DescribeVolumes(Query{IDs: []string{v.ID}})
		if err != nil {
			t.Fatal(err)
		}
		return page.Items[0]
	}
	settle(c)
	for id := range links {
		if _, err := c.AttachVolume(AttachVolumeInput{VolumeID: v.ID, InstanceID: id, Device: "/dev/sdf"}); err != nil {
			t.Fatalf("attach to %s: %v", id, err)
		}
	}
	got := settle(c)
	if len(got.Attachments) != 2 || got.Attachments[0].HostDevice == "" || got.Attachments[0].HostDevice != got.Attachments[1].HostDevice {
		t.Fatalf("attachments %+v: want two on one host device", got.Attachments)
	}
	dev := got.Attachments[0].HostDevice
	for id := range links {
		if linkOf(id) != dev {
			t.Fatalf("%s's link = %q, want %q", id, linkOf(id), dev)
		}
	}

	if _, err := c.DetachVolume(DetachVolumeInput{VolumeID: v.ID, InstanceID: "i-0000000000000000a"}); err != nil {
		t.Fatal(err)
	}
	if got := settle(c); len(got.Attachments) != 1 {
		t.Fatalf("after one detach: %+v", got.Attachments)
	}
	if linkOf("i-0000000000000000a") != "" || linkOf("i-0000000000000000b") != dev {
		t.Fatalf("after detaching from a: a's link %q, b's %q (want none, %s)", linkOf("i-0000000000000000a"), linkOf("i-0000000000000000b"), dev)
	}
	if _, err := os.Stat("/sys/block/" + filepath.Base(dev) + "/loop/backing_file"); err != nil {
		t.Fatalf("the device b still uses was unbound: %v", err)
	}

	// A restart after b's link was lost and a stale link was left for a.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(links["i-0000000000000000b"], disks.LinkName(v.ID))); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dev, filepath.Join(links["i-0000000000000000a"], disks.LinkName(v.ID))); err != nil {
		t.Fatal(err)
	}
	c = start()
	t.Cleanup(func() { _ = c.Close() })
	dev = settle(c).Attachments[0].HostDevice
	if linkOf("i-0000000000000000a") != "" || linkOf("i-0000000000000000b") != dev {
		t.Fatalf("after a restart: a's link %q, b's %q (want none, %s)", linkOf("i-0000000000000000a"), linkOf("i-0000000000000000b"), dev)
	}

	if _, err := c.DetachVolume(DetachVolumeInput{VolumeID: v.ID, InstanceID: "i-0000000000000000b"}); err != nil {
		t.Fatal(err)
	}
	if got := settle(c); len(got.Attachments) != 0 || linkOf("i-0000000000000000b") != "" {
		t.Fatalf("after the last detach: %+v, b's link %q", got.Attachments, linkOf("i-0000000000000000b"))
	}
	if data, err := os.ReadFile("/sys/block/" + filepath.Base(dev) + "/loop/backing_file"); err == nil {
		t.Fatalf("%s is still bound to %s after the last detach", dev, data)
	}
}

// TestAStoppedInstanceSeesNoVolume stops an instance with a view: its
// volume stays attached, as on EC2, but its link goes; a detach completes
// although the host still holds the device open (the stopped guest cannot
// release it); a volume attached while it is stopped appears only when it
// starts. Only the detach of a running instance waits for a busy device.
func TestAStoppedInstanceSeesNoVolume(t *testing.T) {
	testutil.RequireRoot(t, "losetup", "mkfs.ext4", "mount")
	dataDir, links := t.TempDir(), t.TempDir()
	store, err := disks.NewLoopStore(dataDir, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const id = "i-0000000000000000a"
	c, err := New(Config{Store: store, DataDir: dataDir, Instances: []InstanceSpec{
		{ID: id, PrivateIP: "10.89.0.11", View: &disks.View{LinkDir: links}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	v, err := c.CreateVolume(CreateVolumeInput{Zone: "us-east-1a", Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Detach(v.ID, true) })
	link := filepath.Join(links, disks.LinkName(v.ID))
	settle := func() Volume {
		t.Helper()
		page, err := c.DescribeVolumes(Query{IDs: []string{v.ID}})
		if err != nil {
			t.Fatal(err)
		}
		return page.Items[0]
	}
	attach := func() string {
		t.Helper()
		if _, err := c.AttachVolume(AttachVolumeInput{VolumeID: v.ID, InstanceID: id, Device: "/dev/sdf"}); err != nil {
			t.Fatal(err)
		}
		got := settle()
		if len(got.Attachments) != 1 || got.Attachments[0].State != AttachmentAttached {
			t.Fatalf("attachments %+v", got.Attachments)
		}
		return got.Attachments[0].HostDevice
	}
	hasLink := func() bool {
		_, err := os.Lstat(link)
		return err == nil
	}
	settle()
	dev := attach()
	if !hasLink() {
		t.Fatal("no link while the instance runs")
	}
	// Mounted on the host, as the killed node left it: the device is busy.
	mnt := t.TempDir()
	for _, cmd := range [][]string{{"mkfs.ext4", "-q", dev}, {"mount", dev, mnt}} {
		if out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v %s", cmd, err, out)
		}
	}
	mounted := true
	unmount := func() {
		if mounted {
			if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
				t.Errorf("umount: %v %s", err, out)
			}
			mounted = false
		}
	}
	defer unmount()

	if err := c.SetInstanceState(id, InstanceStopped); err != nil {
		t.Fatal(err)
	}
	if hasLink() {
		t.Fatal("the stopped instance still has the volume's link")
	}
	if _, err := c.DetachVolume(DetachVolumeInput{VolumeID: v.ID, InstanceID: id}); err != nil {
		t.Fatal(err)
	}
	if got := settle(); len(got.Attachments) != 0 {
		t.Fatalf("the detach from a stopped instance waits for a device the host holds: %+v", got.Attachments)
	}
	unmount()

	attach()
	if hasLink() {
		t.Fatal("a volume attached to a stopped instance has a link")
	}
	if err := c.SetInstanceState(id, InstanceRunning); err != nil {
		t.Fatal(err)
	}
	if !hasLink() {
		t.Fatal("the started instance does not see its attached volume")
	}
	if _, err := c.DetachVolume(DetachVolumeInput{VolumeID: v.ID, InstanceID: id}); err != nil {
		t.Fatal(err)
	}
	if got := settle(); len(got.Attachments) != 0 || hasLink() {
		t.Fatalf("after the last detach: %+v, link %v", got.Attachments, hasLink())
	}
}

package model

import (
	"os"
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

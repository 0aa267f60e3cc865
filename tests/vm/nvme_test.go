//go:build vm

// Package vm holds the scenarios that need the node VM (hack/vm): they run
// inside it, as root, against Diskplane's node plugin there and its
// controller on the host, while the EC2 emulator attaches volumes to the VM
// as NVMe namespaces with EBS's serial numbers and model. hack/vm/nvme.sh
// (make test-vm) builds them with -tags vm and runs them.
package vm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	mountutils "k8s.io/mount-utils"
)

const gib = 1 << 30

// byIDDir is where udev makes the NVMe links on a Nitro instance and in the VM.
const byIDDir = "/dev/disk/by-id"

// rig is the plugin as the scenarios reach it.
type rig struct {
	t      *testing.T
	ctrl   csi.ControllerClient
	node   csi.NodeClient
	nodeID string
	zone   map[string]string
	dir    string
}

func newRig(t *testing.T) *rig {
	t.Helper()
	nodeAddr, ctrlAddr := os.Getenv("DISKPLANE_VM_NODE"), os.Getenv("DISKPLANE_VM_CONTROLLER")
	if nodeAddr == "" || ctrlAddr == "" {
		t.Skip("!!! SKIPPED: run by hack/vm/nvme.sh inside the node VM (DISKPLANE_VM_NODE, DISKPLANE_VM_CONTROLLER unset) !!!")
	}
	r := &rig{t: t, dir: t.TempDir()}
	r.ctrl = csi.NewControllerClient(dial(t, ctrlAddr))
	r.node = csi.NewNodeClient(dial(t, nodeAddr))
	info, err := r.node.NodeGetInfo(ctx(t), &csi.NodeGetInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	r.nodeID, r.zone = info.GetNodeId(), info.GetAccessibleTopology().GetSegments()
	return r
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	target := strings.TrimPrefix(addr, "tcp://")
	if strings.HasPrefix(addr, "unix://") {
		target = "unix:" + strings.TrimPrefix(addr, "unix://")
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return c
}

var mountCap = &csi.VolumeCapability{
	AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}},
	AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
}

// volume is one volume of a scenario: created for it, deleted after it.
type volume struct {
	name, id string
	publish  map[string]string // the publish context of the current attachment
}

func (r *rig) create(name string) *volume {
	r.t.Helper()
	resp, err := r.ctrl.CreateVolume(ctx(r.t), &csi.CreateVolumeRequest{
		Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: gib},
		VolumeCapabilities: []*csi.VolumeCapability{mountCap}, Parameters: map[string]string{"type": "gp3"},
		AccessibilityRequirements: &csi.TopologyRequirement{Requisite: []*csi.Topology{{Segments: r.zone}}},
	})
	if err != nil {
		r.t.Fatal(err)
	}
	v := &volume{name: name, id: resp.GetVolume().GetVolumeId()}
	r.t.Cleanup(func() {
		_, _ = r.node.NodeUnstageVolume(context.Background(), &csi.NodeUnstageVolumeRequest{VolumeId: v.id, StagingTargetPath: r.staging(v)})
		_, _ = r.ctrl.ControllerUnpublishVolume(context.Background(), &csi.ControllerUnpublishVolumeRequest{VolumeId: v.id, NodeId: r.nodeID})
		if _, err := r.ctrl.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: v.id}); err != nil {
			r.t.Errorf("delete %s: %v", v.id, err)
		}
	})
	return v
}

func (r *rig) attach(v *volume) {
	r.t.Helper()
	resp, err := r.ctrl.ControllerPublishVolume(ctx(r.t), &csi.ControllerPublishVolumeRequest{VolumeId: v.id, NodeId: r.nodeID, VolumeCapability: mountCap})
	if err != nil {
		r.t.Fatalf("attach %s: %v", v.name, err)
	}
	v.publish = resp.GetPublishContext()
}

func (r *rig) detach(v *volume) {
	r.t.Helper()
	if _, err := r.ctrl.ControllerUnpublishVolume(ctx(r.t), &csi.ControllerUnpublishVolumeRequest{VolumeId: v.id, NodeId: r.nodeID}); err != nil {
		r.t.Fatalf("detach %s: %v", v.name, err)
	}
}

func (r *rig) staging(v *volume) string { return filepath.Join(r.dir, v.name) }

func (r *rig) stage(v *volume) error {
	_, err := r.node.NodeStageVolume(ctx(r.t), &csi.NodeStageVolumeRequest{
		VolumeId: v.id, StagingTargetPath: r.staging(v), VolumeCapability: mountCap, PublishContext: v.publish,
	})
	return err
}

func (r *rig) unstage(v *volume) {
	r.t.Helper()
	if _, err := r.node.NodeUnstageVolume(ctx(r.t), &csi.NodeUnstageVolumeRequest{VolumeId: v.id, StagingTargetPath: r.staging(v)}); err != nil {
		r.t.Fatalf("unstage %s: %v", v.name, err)
	}
}

// link is the by-id link udev makes for a volume on a Nitro instance.
func link(v *volume) string {
	return filepath.Join(byIDDir, "nvme-Amazon_Elastic_Block_Store_"+strings.Replace(v.id, "-", "", 1))
}

// deviceOf is the NVMe device the volume is attached as, from its link,
// waiting for udev to make it.
func (r *rig) deviceOf(v *volume) string {
	r.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		dev, err := filepath.EvalSymlinks(link(v))
		if err == nil {
			return dev
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("no by-id link for %s after 30 s: %v", v.id, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// mountedDevice is the device mounted at path, "" when none is.
func mountedDevice(t *testing.T, path string) string {
	t.Helper()
	infos, err := mountutils.ParseMountInfo("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	dev := ""
	for _, mi := range infos {
		if mi.MountPoint == path {
			dev = mi.Source
		}
	}
	return dev
}

func (r *rig) mustStage(v *volume) {
	r.t.Helper()
	if err := r.stage(v); err != nil {
		r.t.Fatalf("stage %s: %v", v.name, err)
	}
}

func (r *rig) writeMarker(v *volume) {
	r.t.Helper()
	if err := os.WriteFile(filepath.Join(r.staging(v), "whoami"), []byte(v.name), 0o600); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) checkMarker(v *volume) {
	r.t.Helper()
	got, err := os.ReadFile(filepath.Join(r.staging(v), "whoami"))
	if err != nil || string(got) != v.name {
		r.t.Fatalf("the staging path of %s holds %q (%v): another volume's data", v.name, got, err)
	}
}

// TestNVMeNamesSwap attaches two volumes, detaches both and attaches them in
// the other order, as a rescheduled pod's volumes come back: the guest's
// NVMe names swap, and each stage must still mount its own volume's data.
func TestNVMeNamesSwap(t *testing.T) {
	r := newRig(t)
	a, b := r.create("swap-a"), r.create("swap-b")
	r.attach(a)
	r.attach(b)
	firstA, firstB := r.deviceOf(a), r.deviceOf(b)
	for _, v := range []*volume{a, b} {
		r.mustStage(v)
		r.writeMarker(v)
		r.unstage(v)
	}
	r.detach(a)
	r.detach(b)

	r.attach(b)
	r.attach(a)
	secondA, secondB := r.deviceOf(a), r.deviceOf(b)
	if secondA != firstB || secondB != firstA {
		t.Fatalf("attached as %s=%s %s=%s, then %s=%s %s=%s: the names did not swap, so this run proves nothing",
			a.id, firstA, b.id, firstB, a.id, secondA, b.id, secondB)
	}
	t.Logf("%s was %s and is now %s; %s was %s and is now %s", a.id, firstA, secondA, b.id, firstB, secondB)
	for _, v := range []*volume{a, b} {
		r.mustStage(v)
		r.checkMarker(v)
		if got, want := mountedDevice(t, r.staging(v)), r.deviceOf(v); got != want {
			t.Errorf("%s is staged from %s, want %s", v.name, got, want)
		}
	}
}

// TestStaleLinkRefused points a volume's by-id link at the other volume's
// device, as a stale link would: the node must never mount the other
// volume. With the volume attached it finds the volume's own device by its
// serial number; with the volume detached it refuses to stage.
func TestStaleLinkRefused(t *testing.T) {
	r := newRig(t)
	a, b := r.create("stale-a"), r.create("stale-b")
	r.attach(a)
	r.attach(b)
	for _, v := range []*volume{a, b} {
		r.mustStage(v)
		r.writeMarker(v)
		r.unstage(v)
	}
	devA, devB := r.deviceOf(a), r.deviceOf(b)
	pointLink(t, link(a), devB)
	r.mustStage(a)
	r.checkMarker(a)
	if got := mountedDevice(t, r.staging(a)); got != devA {
		t.Fatalf("%s is staged from %s, want its own device %s (the stale link pointed at %s)", a.name, got, devA, devB)
	}
	r.unstage(a)

	r.detach(a)
	pointLink(t, link(a), devB)
	err := r.stage(a)
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("stage of a detached volume through a stale link = %v, want FailedPrecondition", err)
	}
	if dev := mountedDevice(t, r.staging(a)); dev != "" {
		t.Fatalf("%s was mounted at %s's staging path after a refusal", dev, a.name)
	}
	r.mustStage(b)
	r.checkMarker(b)
}

// pointLink replaces a by-id link with one to target, in one rename.
func pointLink(t *testing.T, path, target string) {
	t.Helper()
	tmp := path + ".stale"
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Error(fmt.Errorf("remove the stale link: %w", err))
		}
	})
}

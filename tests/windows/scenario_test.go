//go:build windows || (linux && wine)

package windows

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/diskplane/diskplane/pkg/emulator/winhost"
)

const gib = int64(1) << 30

// cluster is what the scenario drives: Diskplane's controller (in the test
// process, over the EC2 emulator), the node plugin under test on the
// Windows host, and that host as the emulator keeps it.
type cluster struct {
	// controller is the controller service.
	controller csi.ControllerServer
	// node returns a client of the node plugin running now.
	node func() csi.NodeClient
	// restartNode kills the node plugin and starts it again.
	restartNode func(t *testing.T)
	// disks is the Windows host's view of every disk it has seen.
	disks func(t *testing.T) []winhost.DiskView
	// setDisk lays a disk out as another system left it.
	setDisk func(t *testing.T, d winhost.Disk)
	// setUnopenable makes a volume's disk one Windows lists but cannot
	// open, or an ordinary one again.
	setUnopenable func(volumeID string, unopenable bool) error
	// mkdir creates a directory on the Windows host, as the kubelet does;
	// exists reports whether a path is there.
	mkdir  func(t *testing.T, path string)
	exists func(t *testing.T, path string) bool
}

// kubelet paths of the scenario, as a Windows kubelet sends them; the
// target in the form with forward slashes, which some kubelets use.
const (
	stagingA = `c:\var\lib\kubelet\plugins\kubernetes.io\csi\ebs.csi.diskplane.io\0a1b2c\globalmount`
	stagingC = `c:\var\lib\kubelet\plugins\kubernetes.io\csi\ebs.csi.diskplane.io\3d4e5f\globalmount`
	podDir   = `c:\var\lib\kubelet\pods\6f7e8d\volumes\kubernetes.io~csi\pvc-a`
	targetA  = `c:/var/lib/kubelet/pods/6f7e8d/volumes/kubernetes.io~csi/pvc-a/mount`
)

func mountCapability() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ntfs"}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

// runScenario is a volume's life on a Windows node: attach, stage
// (partition and NTFS format), publish, the plugin restarted, stage and
// publish again (nothing formatted again), a forced detach and attach while
// staged and a stage again (csi-proxy before v1.3 refuses to mount a volume
// at its own mount point), grow, unpublish, unstage (the disk offline),
// detach, attach and stage again (the filesystem mounted as it is, while
// another disk cannot be opened for a while), detach. Another volume's
// disk is attached throughout and never touched, and a disk another system
// partitioned is refused and left as it was.
func runScenario(t *testing.T, c *cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	info, err := c.node().NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	must(t, err)
	if os := info.GetAccessibleTopology().GetSegments()["kubernetes.io/os"]; os != "windows" {
		t.Fatalf("node topology kubernetes.io/os = %q, want windows", os)
	}
	caps, err := c.node().NodeGetCapabilities(ctx, &csi.NodeGetCapabilitiesRequest{})
	must(t, err)
	for _, cp := range caps.GetCapabilities() {
		if cp.GetRpc().GetType() == csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER {
			t.Fatal("the Windows node offers SINGLE_NODE_MULTI_WRITER")
		}
	}
	nodeID := info.GetNodeId()

	a := createAndAttach(ctx, t, c, "pvc-a", nodeID)
	b := createAndAttach(ctx, t, c, "pvc-b", nodeID) // attached, never used: must stay untouched
	bBefore := diskOf(t, c, b)

	// Stage: the disk is found by its serial number, brought online,
	// partitioned and formatted NTFS once, and mounted at the staging path.
	c.mkdir(t, stagingA)
	stage := &csi.NodeStageVolumeRequest{VolumeId: a, StagingTargetPath: stagingA, VolumeCapability: mountCapability(),
		PublishContext: map[string]string{"devicePath": "/dev/xvdba"}}
	_, err = c.node().NodeStageVolume(ctx, stage)
	must(t, err)
	da := diskOf(t, c, a)
	vol := ntfsVolume(t, da)
	if !da.Online || da.Style != winhost.StyleGPT || vol.Formats != 1 || !slices.Contains(da.MountPoints[vol.ID], strings.ToLower(stagingA)) {
		t.Fatalf("after NodeStageVolume the disk is %+v, mounted at %v; want online, GPT, one NTFS volume formatted once and mounted at the staging path",
			da.Disk, da.MountPoints)
	}

	// Publish: a symlink from the pod's path to the staging path.
	c.mkdir(t, podDir)
	publish := &csi.NodePublishVolumeRequest{VolumeId: a, StagingTargetPath: stagingA, TargetPath: targetA,
		VolumeCapability: mountCapability(), PublishContext: stage.PublishContext}
	_, err = c.node().NodePublishVolume(ctx, publish)
	must(t, err)
	if !c.exists(t, targetA) {
		t.Fatalf("NodePublishVolume left nothing at %s", targetA)
	}
	stats, err := c.node().NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: a, VolumePath: targetA})
	must(t, err)
	if u := stats.GetUsage(); len(u) != 1 || u[0].GetUnit() != csi.VolumeUsage_BYTES || u[0].GetTotal() <= gib/2 || u[0].GetUsed() <= 0 {
		t.Fatalf("NodeGetVolumeStats = %v, want bytes only, about 1 GiB", u)
	}

	// The plugin restarts (a crash, an upgrade); the kubelet stages and
	// publishes again. Nothing is formatted again.
	c.restartNode(t)
	_, err = c.node().NodeStageVolume(ctx, stage)
	must(t, err)
	_, err = c.node().NodePublishVolume(ctx, publish)
	must(t, err)
	if f := ntfsVolume(t, diskOf(t, c, a)).Formats; f != 1 {
		t.Fatalf("the volume was formatted %d times, want once", f)
	}

	// The volume is detached while staged (a forced detach after the node
	// was lost) and attached again. Its disk comes back offline; the
	// staging mount point stayed and reads as none until the disk is
	// online. The kubelet stages and publishes again: the volume is mounted
	// where it was, nothing is formatted.
	detach(ctx, t, c, a, nodeID)
	attach(ctx, t, c, a, nodeID)
	_, err = c.node().NodeStageVolume(ctx, stage)
	must(t, err)
	_, err = c.node().NodePublishVolume(ctx, publish)
	must(t, err)
	if da := diskOf(t, c, a); !da.Online || ntfsVolume(t, da).Formats != 1 || !slices.Contains(da.MountPoints[ntfsVolume(t, da).ID], strings.ToLower(stagingA)) {
		t.Fatalf("staged again after a forced re-attach: %+v mounted at %v; want online, formatted once, mounted at the staging path", da.Disk, da.MountPoints)
	}

	// Grow the volume to 3 GiB: EC2, then the partition and NTFS.
	_, err = c.controller.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: a,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 3 * gib}, VolumeCapability: mountCapability()})
	must(t, err)
	expanded, err := c.node().NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: a, VolumePath: targetA,
		StagingTargetPath: stagingA, CapacityRange: &csi.CapacityRange{RequiredBytes: 3 * gib}, VolumeCapability: mountCapability()})
	must(t, err)
	grown := diskOf(t, c, a)
	if expanded.GetCapacityBytes() != 3*gib || partitionOf(t, grown).Size < 3*gib-64<<20 || ntfsVolume(t, grown).Formats != 1 {
		t.Fatalf("after NodeExpandVolume: capacity %d, disk %+v; want 3 GiB, the partition grown, no format", expanded.GetCapacityBytes(), grown.Disk)
	}

	// A disk another system partitioned (a Linux filesystem's partition,
	// which Windows gives no volume) is refused, and stays as it was.
	c3 := createVolume(ctx, t, c, "pvc-c")
	foreign := winhost.Disk{VolumeID: c3, Size: gib, Style: winhost.StyleGPT, Partitions: []*winhost.Partition{
		{Number: 1, Type: winhost.TypeForeign, Offset: 1 << 20, Size: gib - 2<<20}}}
	c.setDisk(t, foreign)
	attach(ctx, t, c, c3, nodeID)
	c.mkdir(t, stagingC)
	_, err = c.node().NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: c3, StagingTargetPath: stagingC,
		VolumeCapability: mountCapability()})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("staging a disk with a foreign partition = %v, want FailedPrecondition", err)
	}
	if dc := diskOf(t, c, c3); dc.Style != winhost.StyleGPT || len(dc.Partitions) != 1 || dc.Partitions[0].Type != winhost.TypeForeign {
		t.Fatalf("the foreign disk changed: %+v", dc.Disk)
	}

	// Unpublish and unstage, twice each: the symlink and the mount point go,
	// the disk goes offline.
	for range 2 {
		_, err = c.node().NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: a, TargetPath: strings.ReplaceAll(targetA, "/", `\`)})
		must(t, err)
	}
	if c.exists(t, targetA) {
		t.Fatalf("%s is still there after NodeUnpublishVolume", targetA)
	}
	for range 2 {
		_, err = c.node().NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: a, StagingTargetPath: stagingA})
		must(t, err)
	}
	if da := diskOf(t, c, a); da.Online || len(da.MountPoints) > 0 {
		t.Fatalf("after NodeUnstageVolume the disk is online=%v, mounted at %v; want offline, unmounted", da.Online, da.MountPoints)
	}

	// Detached and attached again (the pod moved away and back), the volume
	// is staged with its filesystem as it is: brought online, mounted, not
	// formatted.
	// Meanwhile the other volume's disk cannot be opened for a moment, so
	// the host lists no disk at all: the stage waits it out.
	detach(ctx, t, c, a, nodeID)
	attach(ctx, t, c, a, nodeID)
	must(t, c.setUnopenable(b, true))
	reopened := make(chan error, 1)
	time.AfterFunc(2*time.Second, func() { reopened <- c.setUnopenable(b, false) })
	_, err = c.node().NodeStageVolume(ctx, stage)
	must(t, err)
	must(t, <-reopened)
	if da := diskOf(t, c, a); !da.Online || ntfsVolume(t, da).Formats != 1 || len(da.MountPoints) != 1 {
		t.Fatalf("staged again after a detach: %+v mounted at %v; want online, formatted once, mounted", da.Disk, da.MountPoints)
	}
	_, err = c.node().NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: a, StagingTargetPath: stagingA})
	must(t, err)

	for _, id := range []string{a, b, c3} {
		detach(ctx, t, c, id, nodeID)
	}
	if bAfter := diskOf(t, c, b); bAfter.Online || bAfter.Style != winhost.StyleRaw || len(bAfter.Partitions) != 0 ||
		bBefore.Style != winhost.StyleRaw || bBefore.Online {
		t.Fatalf("the other volume's disk was touched: before %+v, after %+v", bBefore.Disk, bAfter.Disk)
	}
	for _, id := range []string{a, b, c3} {
		_, err = c.controller.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id})
		must(t, err)
	}
}

// createVolume creates a 1 GiB gp3 volume called name.
func createVolume(ctx context.Context, t *testing.T, c *cluster, name string) string {
	t.Helper()
	resp, err := c.controller.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: name,
		CapacityRange: &csi.CapacityRange{RequiredBytes: gib}, VolumeCapabilities: []*csi.VolumeCapability{mountCapability()},
		Parameters: map[string]string{"type": "gp3"}})
	must(t, err)
	return resp.GetVolume().GetVolumeId()
}

// attach attaches a volume to the node and waits until the Windows host
// shows its disk.
func attach(ctx context.Context, t *testing.T, c *cluster, volumeID, nodeID string) {
	t.Helper()
	_, err := c.controller.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: volumeID, NodeId: nodeID,
		VolumeCapability: mountCapability()})
	must(t, err)
	for deadline := time.Now().Add(30 * time.Second); ; {
		if d, ok := findDisk(t, c, volumeID); ok && d.Attached {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the disk of %s never arrived on the Windows host", volumeID)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// detach detaches a volume from the node and waits until its disk has left
// the Windows host.
func detach(ctx context.Context, t *testing.T, c *cluster, volumeID, nodeID string) {
	t.Helper()
	_, err := c.controller.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: volumeID, NodeId: nodeID})
	must(t, err)
	for deadline := time.Now().Add(30 * time.Second); diskOf(t, c, volumeID).Attached; {
		if time.Now().After(deadline) {
			t.Fatalf("the disk of %s is still on the Windows host after ControllerUnpublishVolume", volumeID)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func createAndAttach(ctx context.Context, t *testing.T, c *cluster, name, nodeID string) string {
	t.Helper()
	id := createVolume(ctx, t, c, name)
	attach(ctx, t, c, id, nodeID)
	return id
}

func findDisk(t *testing.T, c *cluster, volumeID string) (winhost.DiskView, bool) {
	t.Helper()
	for _, d := range c.disks(t) {
		if d.VolumeID == volumeID {
			return d, true
		}
	}
	return winhost.DiskView{}, false
}

func diskOf(t *testing.T, c *cluster, volumeID string) winhost.DiskView {
	t.Helper()
	d, ok := findDisk(t, c, volumeID)
	if !ok {
		t.Fatalf("the Windows host has never seen the disk of %s", volumeID)
	}
	return d
}

// partitionOf returns the disk's one basic data partition.
func partitionOf(t *testing.T, d winhost.DiskView) *winhost.Partition {
	t.Helper()
	var found []*winhost.Partition
	for _, p := range d.Partitions {
		if p.Type == winhost.TypeBasic {
			found = append(found, p)
		}
	}
	if len(found) != 1 || found[0].Volume == nil {
		t.Fatalf("disk of %s has partitions %+v, want one basic data partition with a volume", d.VolumeID, d.Partitions)
	}
	return found[0]
}

// ntfsVolume returns the NTFS volume of the disk's basic data partition.
func ntfsVolume(t *testing.T, d winhost.DiskView) *winhost.Volume {
	t.Helper()
	v := partitionOf(t, d).Volume
	if v.FileSystem != "NTFS" {
		t.Fatalf("volume %s of %s holds %q, want NTFS", v.ID, d.VolumeID, v.FileSystem)
	}
	return v
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

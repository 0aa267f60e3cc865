//go:build bench

package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/diskplane/diskplane/pkg/testutil"
)

// nodeInstance is the instance the node benchmarks play: a large one, so
// that fifty volumes fit its attachment limit.
const nodeInstance = "i-0000000000000b0de"

// nodeRig is the node plugin as a DaemonSet runs it (the binary, --mode=node)
// on this host, with the EC2 emulator attaching real loop devices to it.
type nodeRig struct {
	t    *testing.T
	dir  string
	e    *emulator
	ec2  *ec2.Client
	node csi.NodeClient
	proc *process
}

func newNodeRig(t *testing.T, dir string) *nodeRig {
	t.Helper()
	testutil.RequireRoot(t, "losetup", "mkfs.ext4", "mkfs.xfs", "blkid", "mount")
	links := filepath.Join(dir, "by-id")
	data := filepath.Join(dir, "emulator")
	e := startEmulator(t, dir, "emulator", "--data-dir="+data, "--device-link-dir="+links, "--zones="+zone+"=use1-az1",
		"--volume-create-latency=0s", "--attach-latency=0s", "--detach-latency=0s", "--volume-delete-latency=0s",
		"--instance=id="+nodeInstance+",type=m7i.48xlarge,zone="+zone+",local")
	// Whatever a failed run leaves bound is released after the emulator stops.
	t.Cleanup(func() {
		out, err := exec.Command(binary(t, "ec2-emulator"), "release-devices", "--data-dir="+data, "--device-link-dir="+links).CombinedOutput()
		if err != nil {
			t.Errorf("release the emulator's devices: %v: %s", err, out)
		}
	})
	endpoint := "unix://" + filepath.Join(dir, "node.sock")
	proc := start(t, dir, "diskplane-node", binary(t, "diskplane"), []string{"AWS_EC2_METADATA_SERVICE_ENDPOINT=" + e.imds},
		"--mode=node", "--endpoint="+endpoint, "--device-link-dir="+links, "--emulator-loop-devices", "--v=2")
	conn := dial(t, endpoint)
	waitFor(t, "the node plugin to answer", time.Minute, func() bool {
		_, err := csi.NewNodeClient(conn).NodeGetInfo(context.Background(), &csi.NodeGetInfoRequest{})
		return err == nil
	})
	return &nodeRig{t: t, dir: dir, e: e, node: csi.NewNodeClient(conn), proc: proc,
		ec2: ec2.New(ec2.Options{Region: "us-east-1", BaseEndpoint: aws.String(e.ec2),
			Credentials: credentials.NewStaticCredentialsProvider("bench", "bench", "")})}
}

// attached creates a volume of sizeGiB, attaches it to the node and
// returns its ID and device name; the volume is detached and deleted when
// the test ends.
func (n *nodeRig) attached(sizeGiB int32, device string) string {
	t := n.t
	ctx := context.Background()
	out, err := n.ec2.CreateVolume(ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String(zone), Size: aws.Int32(sizeGiB), VolumeType: types.VolumeTypeGp3})
	if err != nil {
		t.Fatal(err)
	}
	id := aws.ToString(out.VolumeId)
	n.waitVolume(id, "available")
	if _, err := n.ec2.AttachVolume(ctx, &ec2.AttachVolumeInput{VolumeId: aws.String(id), InstanceId: aws.String(nodeInstance), Device: aws.String(device)}); err != nil {
		t.Fatal(err)
	}
	n.waitVolume(id, "in-use")
	t.Cleanup(func() {
		// A volume released ahead of the end is detached already.
		_, _ = n.ec2.DetachVolume(ctx, &ec2.DetachVolumeInput{VolumeId: aws.String(id), Force: aws.Bool(true)})
		n.waitVolume(id, "available")
		if _, err := n.ec2.DeleteVolume(ctx, &ec2.DeleteVolumeInput{VolumeId: aws.String(id)}); err != nil {
			t.Errorf("delete %s: %v", id, err)
		}
	})
	return id
}

// waitVolume polls until the volume is in state (and, for in-use, attached).
func (n *nodeRig) waitVolume(id, state string) {
	n.t.Helper()
	waitFor(n.t, id+" "+state, time.Minute, func() bool {
		out, err := n.ec2.DescribeVolumes(context.Background(), &ec2.DescribeVolumesInput{VolumeIds: []string{id}})
		if err != nil || len(out.Volumes) != 1 || string(out.Volumes[0].State) != state {
			return false
		}
		a := out.Volumes[0].Attachments
		return state != "in-use" || (len(a) == 1 && a[0].State == types.VolumeAttachmentStateAttached)
	})
}

// mountCapability is ReadWriteOnce filesystem access.
func mountCapability(fsType string) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fsType}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

// stage stages a volume at a path of its own and unstages it when the test
// ends; it returns the staging path and how long NodeStageVolume took.
func (n *nodeRig) stage(id, device, fsType string) (string, time.Duration) {
	t := n.t
	staging := filepath.Join(n.dir, "staging", id)
	started := time.Now()
	_, err := n.node.NodeStageVolume(context.Background(), &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging,
		VolumeCapability: mountCapability(fsType), PublishContext: map[string]string{"devicePath": device}})
	took := time.Since(started)
	if err != nil {
		t.Fatalf("NodeStageVolume %s: %v", id, err)
	}
	t.Cleanup(func() {
		if _, err := n.node.NodeUnstageVolume(context.Background(), &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
			t.Errorf("unstage %s: %v", id, err)
		}
	})
	return staging, took
}

// publish publishes a staged volume at a target of its own, unpublished when
// the test ends.
func (n *nodeRig) publish(id, staging, fsType string) {
	t := n.t
	target := filepath.Join(n.dir, "pods", id, "mount")
	if _, err := n.node.NodePublishVolume(context.Background(), &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging,
		TargetPath: target, VolumeCapability: mountCapability(fsType)}); err != nil {
		t.Fatalf("NodePublishVolume %s: %v", id, err)
	}
	t.Cleanup(func() {
		if _, err := n.node.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
			t.Errorf("unpublish %s: %v", id, err)
		}
	})
}

// benchNode measures the node plugin (P4): its memory and CPU idle, while
// it stages and publishes fifty volumes, and with the fifty mounted while
// the kubelet asks for their stats; and a stage of a 100 GiB volume against
// doing its work by hand (P5).
func benchNode(t *testing.T, r *report) {
	volumes := 50
	if *profile == "ci" {
		volumes = 10
	}
	dir := filepath.Join(r.dir, "node")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	n := newNodeRig(t, dir)
	time.Sleep(5 * time.Second)
	idle := n.proc.usage(t)
	section := fmt.Sprintf("P4 node plugin, %d volumes", volumes)
	r.add(section, "idle: RSS", float64(idle.RSSKB)/1024, 0, "MiB", fmt.Sprintf("%d CPU ticks since start", idle.CPUTicks))

	ids := make([]string, volumes)
	for i := range ids {
		ids[i] = n.attached(1, fmt.Sprintf("/dev/xvd%c%c", 'b'+i/26, 'a'+i%26))
	}
	cpu := sample(t, n.proc)
	started := time.Now()
	var wg sync.WaitGroup
	stagings := make([]string, volumes)
	work := make(chan int)
	var mu sync.Mutex
	for range 10 {
		wg.Go(func() {
			for i := range work {
				staging, _ := n.stage(ids[i], "", "ext4")
				mu.Lock()
				stagings[i] = staging
				mu.Unlock()
			}
		})
	}
	for i := range ids {
		work <- i
	}
	close(work)
	wg.Wait()
	for i, id := range ids {
		n.publish(id, stagings[i], "ext4")
	}
	took := time.Since(started)
	busy := cpu.end()
	r.add(section, "stage and publish all, 10 at a time: time", took.Seconds(), 0, "s", "mkfs.ext4 and mount of each")
	r.add(section, "stage and publish all: CPU", float64(busy.CPUTicks), 0, "ticks", fmt.Sprintf("peak RSS %d MiB", busy.PeakRSSKB/1024))

	cpu = sample(t, n.proc)
	for range 3 {
		for i, id := range ids {
			if _, err := n.node.NodeGetVolumeStats(context.Background(), &csi.NodeGetVolumeStatsRequest{VolumeId: id,
				VolumePath: filepath.Join(n.dir, "pods", id, "mount"), StagingTargetPath: stagings[i]}); err != nil {
				t.Errorf("NodeGetVolumeStats %s: %v", id, err)
			}
		}
		time.Sleep(5 * time.Second)
	}
	mounted := cpu.end()
	r.add(section, "mounted, stats asked of each 3 times: RSS", float64(mounted.RSSKB)/1024, 0, "MiB",
		fmt.Sprintf("%d CPU ticks over 15 s", mounted.CPUTicks))

	benchStage(t, r, n)
}

// benchStage times NodeStageVolume of a 100 GiB sparse volume, which formats
// and mounts it, against the same mkfs and mount run by hand on a volume of
// the same size (P5): the floor is what the tools themselves take.
func benchStage(t *testing.T, r *report, n *nodeRig) {
	for _, fsType := range []string{"ext4", "xfs"} {
		staged := n.attached(100, "/dev/xvdza")
		_, took := n.stage(staged, "", fsType)
		byHand := n.attached(100, "/dev/xvdzb")
		link := filepath.Join(n.dir, "by-id", "nvme-Amazon_Elastic_Block_Store_"+strings.Replace(byHand, "-", "", 1))
		device, err := filepath.EvalSymlinks(link)
		if err != nil {
			t.Fatal(err)
		}
		mnt := filepath.Join(n.dir, "by-hand", byHand)
		if err := os.MkdirAll(mnt, 0o755); err != nil {
			t.Fatal(err)
		}
		mkfs := []string{"mkfs." + fsType, device}
		if fsType == "ext4" {
			mkfs = []string{"mkfs.ext4", "-m0", device}
		}
		started := time.Now()
		for _, c := range [][]string{mkfs, {"mount", device, mnt}} {
			if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
				t.Fatalf("%v: %v: %s", c, err, out)
			}
		}
		floor := time.Since(started)
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
		r.add("P5 stage a 100 GiB volume", "NodeStageVolume, "+fsType, took.Seconds(), floor.Seconds(), "s",
			"floor: mkfs."+fsType+" and mount by hand on the same kind of device")
		// Detached before the next size's volumes take these device names.
		n.release(staged, byHand)
	}
	benchEncryptedStage(t, r)
}

// benchEncryptedStage reports P5 for LUKS2 from what make bench's VM step
// left (p5-luks.json).
func benchEncryptedStage(t *testing.T, r *report) {
	var rows []EncryptedStage
	if !r.readStep(t, "p5-luks.json", &rows, "P5 with LUKS2 was not run: make bench runs it in the node VM first (pkg/driver/node TestStageEncryptedFigures)") {
		return
	}
	for _, row := range rows {
		r.add("P5 stage a 100 GiB volume", "NodeStageVolume, LUKS2 + "+row.FsType+" (node VM)", row.Stage.Seconds(), row.ByHand.Seconds(), "s",
			"floor: cryptsetup luksFormat (Argon2id 32 MiB, 2 s) and open, mkfs."+row.FsType+" and mount by hand, in the node VM (software-emulated CPU)")
	}
	r.raw["encryptedStage"] = rows
}

// release unstages and detaches volumes ahead of the test's end; the
// clean-ups then find them gone.
func (n *nodeRig) release(ids ...string) {
	for _, id := range ids {
		_, _ = n.node.NodeUnstageVolume(context.Background(), &csi.NodeUnstageVolumeRequest{VolumeId: id,
			StagingTargetPath: filepath.Join(n.dir, "staging", id)})
		if _, err := n.ec2.DetachVolume(context.Background(), &ec2.DetachVolumeInput{VolumeId: aws.String(id)}); err == nil {
			n.waitVolume(id, "available")
		}
	}
}

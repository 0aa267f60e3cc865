//go:build moto

package moto

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// lifecyclesEnv sets how many lifecycles TestLifecycleLoad runs (make
// test-moto's CI profile runs fewer).
const lifecyclesEnv = "MOTO_LIFECYCLES"

// concurrency is how many lifecycles run at once, as a few sidecars' workers.
const concurrency = 5

// TestLifecycleLoad drives volumes through the controller over gRPC, each
// RPC once, as the CSI sidecars would on a healthy cloud: every RPC must
// succeed the first time, and nothing may be left behind. Each lifecycle
// creates a volume in its node's zone (two nodes in us-east-1a, one in
// us-east-1b), publishes it, checks that a publish of it to the other node
// of that zone is refused, snapshots it, restores the snapshot into a new
// volume, expands and modifies it, unpublishes it and deletes all three.
// Multi-attach is left out: moto keeps one attachment per volume.
func TestLifecycleLoad(t *testing.T) {
	n := 30
	if v := os.Getenv(lifecyclesEnv); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number", lifecyclesEnv, v)
		}
	}
	r := startRig(t, "us-east-1a", "us-east-1a", "us-east-1b")
	pairs := [][2]instance{{r.instances[0], r.instances[1]}, {r.instances[1], r.instances[0]}, {r.instances[2], r.instances[0]}}

	start := time.Now()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		slots = make(chan struct{}, concurrency)
		calls = map[string][]time.Duration{}
	)
	for i := range n {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			pair := pairs[i%len(pairs)]
			l := lifecycle{client: r.client, name: fmt.Sprintf("pvc-moto-%03d", i), node: pair[0], other: pair[1]}
			if err := l.run(t.Context()); err != nil {
				t.Errorf("lifecycle %s: %v", l.name, err)
			}
			mu.Lock()
			for rpc, d := range l.took {
				calls[rpc] = append(calls[rpc], d...)
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	t.Logf("%d lifecycles, %d at a time, in %s", n, concurrency, time.Since(start).Round(time.Millisecond))
	for _, rpc := range []string{"CreateVolume", "ControllerPublishVolume", "CreateSnapshot", "ControllerExpandVolume",
		"ControllerModifyVolume", "ControllerUnpublishVolume", "DeleteSnapshot", "DeleteVolume"} {
		t.Logf("  %-26s %4d calls, mean %s", rpc, len(calls[rpc]), mean(calls[rpc]).Round(time.Millisecond))
	}
	r.checkNothingLeft(t)
}

// lifecycle is one volume's life through the controller.
type lifecycle struct {
	client      csi.ControllerClient
	name        string
	node, other instance
	took        map[string][]time.Duration
}

// call runs one RPC with a sidecar's deadline and records its time.
func (l *lifecycle) call(ctx context.Context, rpc string, do func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	begin := time.Now()
	err := do(ctx)
	if l.took == nil {
		l.took = map[string][]time.Duration{}
	}
	l.took[rpc] = append(l.took[rpc], time.Since(begin))
	if err != nil {
		return fmt.Errorf("%s: %w", rpc, err)
	}
	return nil
}

func (l *lifecycle) run(ctx context.Context) error {
	mount := &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
	zone := []*csi.Topology{{Segments: map[string]string{"topology.kubernetes.io/zone": l.node.Zone}}}
	create := func(name string, source *csi.VolumeContentSource) (string, error) {
		var id string
		err := l.call(ctx, "CreateVolume", func(ctx context.Context) error {
			resp, err := l.client.CreateVolume(ctx, &csi.CreateVolumeRequest{
				Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: gib},
				VolumeCapabilities: []*csi.VolumeCapability{mount}, Parameters: map[string]string{"type": "gp3"},
				AccessibilityRequirements: &csi.TopologyRequirement{Requisite: zone, Preferred: zone},
				VolumeContentSource:       source,
			})
			if err == nil {
				id = resp.GetVolume().GetVolumeId()
				if got := resp.GetVolume().GetAccessibleTopology(); len(got) != 1 || got[0].GetSegments()["topology.kubernetes.io/zone"] != l.node.Zone {
					err = fmt.Errorf("volume %s is accessible from %v, want zone %s", id, got, l.node.Zone)
				}
			}
			return err
		})
		return id, err
	}
	volume, err := create(l.name, nil)
	if err != nil {
		return err
	}
	if err := l.call(ctx, "ControllerPublishVolume", func(ctx context.Context) error {
		_, err := l.client.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: volume, NodeId: l.node.ID, VolumeCapability: mount})
		return err
	}); err != nil {
		return err
	}
	if l.other.Zone == l.node.Zone {
		_, err := l.client.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: volume, NodeId: l.other.ID, VolumeCapability: mount})
		if status.Code(err) != codes.FailedPrecondition {
			return fmt.Errorf("publishing %s, attached to %s for one node, to %s too: %v, want FailedPrecondition", volume, l.node.ID, l.other.ID, err)
		}
	}
	var snapshot string
	if err := l.call(ctx, "CreateSnapshot", func(ctx context.Context) error {
		resp, err := l.client.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snapshot-" + l.name, SourceVolumeId: volume})
		if err == nil {
			snapshot = resp.GetSnapshot().GetSnapshotId()
			if !resp.GetSnapshot().GetReadyToUse() {
				err = fmt.Errorf("snapshot %s is not ready, and moto completes snapshots at once", snapshot)
			}
		}
		return err
	}); err != nil {
		return err
	}
	restored, err := create(l.name+"-restored", &csi.VolumeContentSource{
		Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snapshot}},
	})
	if err != nil {
		return err
	}
	if err := l.call(ctx, "ControllerExpandVolume", func(ctx context.Context) error {
		resp, err := l.client.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{
			VolumeId: volume, CapacityRange: &csi.CapacityRange{RequiredBytes: 2 * gib}, VolumeCapability: mount,
		})
		if err == nil && resp.GetCapacityBytes() < 2*gib {
			err = fmt.Errorf("expanded to %d bytes, want at least %d", resp.GetCapacityBytes(), 2*gib)
		}
		return err
	}); err != nil {
		return err
	}
	if err := l.call(ctx, "ControllerModifyVolume", func(ctx context.Context) error {
		_, err := l.client.ControllerModifyVolume(ctx, &csi.ControllerModifyVolumeRequest{
			VolumeId: volume, MutableParameters: map[string]string{"throughput": "250", "tagSpecification_1": "tier=gold"},
		})
		return err
	}); err != nil {
		return err
	}
	if err := l.call(ctx, "ControllerUnpublishVolume", func(ctx context.Context) error {
		_, err := l.client.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: volume, NodeId: l.node.ID})
		return err
	}); err != nil {
		return err
	}
	if err := l.call(ctx, "DeleteSnapshot", func(ctx context.Context) error {
		_, err := l.client.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: snapshot})
		return err
	}); err != nil {
		return err
	}
	for _, id := range []string{restored, volume} {
		if err := l.call(ctx, "DeleteVolume", func(ctx context.Context) error {
			_, err := l.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id})
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}

func mean(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

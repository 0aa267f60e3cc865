//go:build chaos

package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// GiB is the unit volume sizes are asked in.
const GiB = int64(1) << 30

// lifecycle is one volume's life through the controller, driven the way
// the CSI sidecars drive it: provision (external-provisioner), attach
// (external-attacher), a snapshot until it is ready (external-snapshotter),
// a resize and a VolumeAttributesClass change (external-resizer, both at
// once), detach, and the deletes. A multi-attach one is an io2 volume made
// for multi-node block access but published to one node (SINGLE_NODE_WRITER):
// while it is attached there, a publish to another node must be refused.
type lifecycle struct {
	n           int
	name        string
	node, other string
	zone        string
	snapshot    bool
	modify      bool
	multiAttach bool
}

// result is what one lifecycle did and saw.
type result struct {
	// volumeID and snapshotID are what the controller returned.
	volumeID, snapshotID string
	// volumeDeleted and snapshotDeleted are true once their deletes
	// succeeded.
	volumeDeleted, snapshotDeleted bool
	// incomplete names the step that never succeeded within stepTimeout.
	incomplete string
}

// stepTimeout bounds how long a step is retried: far longer than any fault
// lasts, so a step still failing then is a step that never completes.
const stepTimeout = 5 * time.Minute

// rpcTimeout is each attempt's deadline, as a sidecar's --timeout.
const rpcTimeout = 15 * time.Second

// sidecar retries one CSI call until it succeeds, with backoff, like the
// sidecars do, and counts the errors it saw by code.
type sidecar struct {
	client csi.ControllerClient
	errs   *errorCounts
	rand   *lockedRand

	mu     sync.Mutex
	active map[string]int
}

// steps counts the steps under way, by name, for the progress report.
func (s *sidecar) steps() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, v := range s.active {
		if v > 0 {
			out[k] = v
		}
	}
	return out
}

// track counts a step under way until the returned function is called.
func (s *sidecar) track(step string) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active == nil {
		s.active = map[string]int{}
	}
	s.active[step]++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.active[step]--
	}
}

// until calls fn until it succeeds (done reports whether the result is
// final: a snapshot not yet ready is asked for again) or stepTimeout.
func (s *sidecar) until(ctx context.Context, step string, fn func(ctx context.Context) (done bool, err error)) error {
	defer s.track(step)()
	deadline := time.Now().Add(stepTimeout)
	pause := 100 * time.Millisecond
	for {
		attempt, cancel := context.WithTimeout(ctx, rpcTimeout)
		done, err := fn(attempt)
		cancel()
		if err != nil {
			s.errs.add(step, status.Code(err))
		}
		if err == nil && done {
			return nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("%s: never completed; last error: %v", step, err)
		}
		time.Sleep(pause + time.Duration(s.rand.Int64N(int64(pause))))
		if err != nil {
			pause = min(2*pause, 3*time.Second)
		}
	}
}

// run drives the lifecycle to its end; a step that never completes ends it
// early (what it made stays, and the audit says so).
func (l lifecycle) run(ctx context.Context, s *sidecar) result {
	var r result
	fail := func(err error) result {
		r.incomplete = err.Error()
		return r
	}
	mount := &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
	create, params, size := mount, map[string]string{"type": "gp3"}, GiB
	if l.multiAttach {
		block := func(mode csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
			return &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
				AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode}}
		}
		create, mount = block(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER), block(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
		params, size = map[string]string{"type": "io2", "iops": "400"}, 4*GiB
	}
	topology := &csi.TopologyRequirement{
		Requisite: []*csi.Topology{{Segments: map[string]string{"topology.kubernetes.io/zone": l.zone}}},
		Preferred: []*csi.Topology{{Segments: map[string]string{"topology.kubernetes.io/zone": l.zone}}},
	}
	err := s.until(ctx, "CreateVolume", func(ctx context.Context) (bool, error) {
		resp, err := s.client.CreateVolume(ctx, &csi.CreateVolumeRequest{
			Name: l.name, CapacityRange: &csi.CapacityRange{RequiredBytes: size},
			VolumeCapabilities: []*csi.VolumeCapability{create}, Parameters: params,
			AccessibilityRequirements: topology,
		})
		if err == nil {
			r.volumeID = resp.GetVolume().GetVolumeId()
		}
		return err == nil, err
	})
	if err != nil {
		return fail(err)
	}
	err = s.until(ctx, "ControllerPublishVolume", func(ctx context.Context) (bool, error) {
		_, err := s.client.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{
			VolumeId: r.volumeID, NodeId: l.node, VolumeCapability: mount,
		})
		return err == nil, err
	})
	if err != nil {
		return fail(err)
	}
	if l.multiAttach {
		// Asked until the controller decides: refused (as it must be), or
		// published (a second node for a single-node volume).
		twice := false
		err = s.until(ctx, "ControllerPublishVolume to a second node", func(ctx context.Context) (bool, error) {
			_, err := s.client.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{
				VolumeId: r.volumeID, NodeId: l.other, VolumeCapability: mount,
			})
			twice = err == nil
			if status.Code(err) == codes.FailedPrecondition {
				return true, nil
			}
			return err == nil, err
		})
		if err == nil && twice {
			err = fmt.Errorf("volume %s, published to %s for one node, was published to %s too", r.volumeID, l.node, l.other)
		}
		if err != nil {
			return fail(err)
		}
	}
	if l.snapshot {
		err = s.until(ctx, "CreateSnapshot", func(ctx context.Context) (bool, error) {
			resp, err := s.client.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snapshot-" + l.name, SourceVolumeId: r.volumeID})
			if err != nil {
				return false, err
			}
			if id := resp.GetSnapshot().GetSnapshotId(); r.snapshotID != "" && id != r.snapshotID {
				return false, fmt.Errorf("CreateSnapshot answered %s, and %s before", id, r.snapshotID)
			}
			r.snapshotID = resp.GetSnapshot().GetSnapshotId()
			return resp.GetSnapshot().GetReadyToUse(), nil
		})
		if err != nil {
			return fail(err)
		}
	}
	if l.modify {
		var wg sync.WaitGroup
		errs := make([]error, 2)
		wg.Go(func() {
			errs[0] = s.until(ctx, "ControllerExpandVolume", func(ctx context.Context) (bool, error) {
				resp, err := s.client.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{
					VolumeId: r.volumeID, CapacityRange: &csi.CapacityRange{RequiredBytes: 2 * GiB}, VolumeCapability: mount,
				})
				if err == nil && resp.GetCapacityBytes() < 2*GiB {
					return false, fmt.Errorf("expanded to %d bytes, want at least %d", resp.GetCapacityBytes(), 2*GiB)
				}
				return err == nil, err
			})
		})
		wg.Go(func() {
			errs[1] = s.until(ctx, "ControllerModifyVolume", func(ctx context.Context) (bool, error) {
				_, err := s.client.ControllerModifyVolume(ctx, &csi.ControllerModifyVolumeRequest{
					VolumeId: r.volumeID, MutableParameters: map[string]string{"throughput": "250", "tagSpecification_1": "tier=gold"},
				})
				return err == nil, err
			})
		})
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return fail(err)
		}
	}
	err = s.until(ctx, "ControllerUnpublishVolume", func(ctx context.Context) (bool, error) {
		_, err := s.client.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: r.volumeID, NodeId: l.node})
		return err == nil, err
	})
	if err != nil {
		return fail(err)
	}
	if r.snapshotID != "" {
		err = s.until(ctx, "DeleteSnapshot", func(ctx context.Context) (bool, error) {
			_, err := s.client.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: r.snapshotID})
			return err == nil, err
		})
		if err != nil {
			return fail(err)
		}
		r.snapshotDeleted = true
	}
	err = s.until(ctx, "DeleteVolume", func(ctx context.Context) (bool, error) {
		_, err := s.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: r.volumeID})
		return err == nil, err
	})
	if err != nil {
		return fail(err)
	}
	r.volumeDeleted = true
	return r
}

// errorCounts counts the errors the sidecars saw, by step and code.
type errorCounts struct {
	mu     sync.Mutex
	counts map[string]int
}

func (e *errorCounts) add(step string, code codes.Code) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.counts == nil {
		e.counts = map[string]int{}
	}
	e.counts[step+" "+code.String()]++
}

// lockedRand is a random source shared by goroutines.
type lockedRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func newLockedRand(seed uint64) *lockedRand {
	return &lockedRand{r: rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))}
}

// Int64N returns a random number in [0, n).
func (l *lockedRand) Int64N(n int64) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Int64N(n)
}

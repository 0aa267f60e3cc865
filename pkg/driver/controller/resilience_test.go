package controller

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/faults"
	"github.com/diskplane/diskplane/pkg/emulator/model"
	"github.com/diskplane/diskplane/pkg/inflight"
)

// untilDone repeats call while it answers Aborted, as a sidecar does.
func untilDone[T any](t *testing.T, call func() (T, error)) (T, error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := call()
		if status.Code(err) != codes.Aborted || time.Now().After(deadline) {
			return out, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDuplicateStorm sends the same CreateVolume 20 times at once, then the
// same ControllerPublishVolume 20 times at once: one volume, one attachment.
func TestDuplicateStorm(t *testing.T) {
	h := newHarness(t, emulatortest.Options{Latencies: model.Latencies{VolumeCreate: 300 * time.Millisecond, Attach: 300 * time.Millisecond}}, Options{})
	const n = 20
	ids := make([]string, n)
	errs := make([]error, n)
	aborted := make([]bool, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			resp, err := h.svc.CreateVolume(h.ctx(), createReq("pvc-storm", 10, h.env.Zone()))
			if status.Code(err) == codes.Aborted {
				aborted[i] = true
				resp, err = untilDone(t, func() (*csi.CreateVolumeResponse, error) {
					return h.svc.CreateVolume(h.ctx(), createReq("pvc-storm", 10, h.env.Zone()))
				})
			}
			ids[i], errs[i] = resp.GetVolume().GetVolumeId(), err
		})
	}
	wg.Wait()
	sawAborted := false
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		if ids[i] != ids[0] {
			t.Fatalf("request %d got volume %s, request 0 got %s", i, ids[i], ids[0])
		}
		sawAborted = sawAborted || aborted[i]
	}
	if !sawAborted {
		t.Fatal("no concurrent duplicate was answered Aborted")
	}
	if vols := h.volumes(); len(vols) != 1 {
		t.Fatalf("%d volumes in the cloud, want 1", len(vols))
	}

	node := h.env.LocalInstance().ID
	devices := make([]string, n)
	for i := range n {
		wg.Go(func() {
			resp, err := untilDone(t, func() (*csi.ControllerPublishVolumeResponse, error) { return h.publish(ids[0], node, rwo) })
			devices[i], errs[i] = resp.GetPublishContext()["devicePath"], err
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || devices[i] != devices[0] {
			t.Fatalf("publish %d: %q, %v; publish 0 got %q", i, devices[i], errs[i], devices[0])
		}
	}
	if got := h.attachedTo(t, ids[0]); len(got) != 1 || got[0] != node {
		t.Fatalf("attachments %v, want one to %s", got, node)
	}
}

// interrupt runs call with a context it cancels as soon as the emulator has
// received action, the way a controller killed half way through leaves the
// cloud: the request was sent, the answer never read.
func interrupt(t *testing.T, h *harness, action string, call func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	before := h.env.Calls(action)
	done := make(chan error, 1)
	go func() { done <- call(ctx) }()
	eventually(t, action+" to reach the cloud", func() bool { return h.env.Calls(action) > before })
	cancel()
	if err := <-done; err == nil {
		t.Fatalf("the interrupted %s finished anyway; make the emulator slower", action)
	}
}

// TestRestartHalfWay kills the controller during a create and during an
// attach, starts a new one and retries: one volume, one attachment.
func TestRestartHalfWay(t *testing.T) {
	h := newHarness(t, emulatortest.Options{Latencies: model.Latencies{VolumeCreate: 500 * time.Millisecond, Attach: 500 * time.Millisecond}}, Options{})
	req := createReq("pvc-restart", 10, h.env.Zone())

	interrupt(t, h, "CreateVolume", func(ctx context.Context) error {
		_, err := h.svc.CreateVolume(ctx, req)
		return err
	})
	h.restart()
	vol := h.createVolume(t, req)
	if vols := h.volumes(); len(vols) != 1 || vols[0].ID != vol.VolumeId {
		t.Fatalf("volumes %+v, want only %s", vols, vol.VolumeId)
	}

	node := h.env.LocalInstance().ID
	interrupt(t, h, "AttachVolume", func(ctx context.Context) error {
		_, err := h.svc.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: vol.VolumeId, NodeId: node, VolumeCapability: rwo})
		return err
	})
	h.restart()
	resp, err := h.publish(vol.VolumeId, node, rwo)
	if err != nil {
		t.Fatalf("publish after restart: %v", err)
	}
	v := h.volume(t, vol.VolumeId)
	if len(v.Attachments) != 1 || v.Attachments[0].InstanceID != node || v.Attachments[0].Device != resp.GetPublishContext()["devicePath"] {
		t.Fatalf("attachments %+v, want one to %s at %s", v.Attachments, node, resp.GetPublishContext()["devicePath"])
	}
}

// TestThrottlingAndServerErrorsAreInvisible runs volumes' whole lives while
// EC2 throttles and fails about a third of all calls with 500/503: every RPC
// must still succeed (only slower). A burst of creates against a tiny
// mutating bucket makes sure throttling really happens.
func TestThrottlingAndServerErrorsAreInvisible(t *testing.T) {
	burst := faults.Config{Throttle: faults.Throttle{
		Enabled:            true,
		Mutating:           faults.Bucket{Size: 1, RefillPerSecond: 2},
		Describe:           faults.Bucket{Size: 50, RefillPerSecond: 50},
		UnfilteredDescribe: faults.Bucket{Size: 50, RefillPerSecond: 50},
	}}
	h := newHarness(t, emulatortest.Options{Faults: burst}, Options{ModifyCoalesceWindow: 10 * time.Millisecond})
	node := h.env.LocalInstance().ID
	const n = 6
	vols := make([]*csi.Volume, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			resp, err := h.svc.CreateVolume(h.ctx(), createReq(fmt.Sprintf("pvc-faulty-%d", i), 4, h.env.Zone()))
			vols[i], errs[i] = resp.GetVolume(), err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("create %d while throttled: %v", i, err)
		}
	}
	if throttled := h.env.CallsWithCode("CreateVolume", "RequestLimitExceeded"); throttled == 0 {
		t.Fatal("a burst of creates against a one-token bucket was never throttled: the test proves nothing")
	}

	err := h.env.Faults().Set(faults.Config{
		Seed: 42,
		Throttle: faults.Throttle{
			Enabled:            true,
			Mutating:           faults.Bucket{Size: 2, RefillPerSecond: 20},
			Describe:           faults.Bucket{Size: 4, RefillPerSecond: 40},
			UnfilteredDescribe: faults.Bucket{Size: 2, RefillPerSecond: 20},
		},
		Errors: []faults.ErrorRule{
			{Action: "*", Code: faults.CodeInternalError, Probability: 0.2},
			{Action: "*", Code: faults.CodeUnavailable, Probability: 0.15},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	for i, vol := range vols[:3] {
		_, err := h.publish(vol.VolumeId, node, rwo)
		must("publish", err)
		_, err = h.expand(vol.VolumeId, 8*GiB, rwo)
		must("expand", err)
		must("modify", h.modify(vol.VolumeId, map[string]string{"iops": "3500", "tagSpecification_1": "k=v"}))
		snap := h.snapshot(t, fmt.Sprintf("snap-faulty-%d", i), vol.VolumeId, nil)
		_, err = h.svc.ListVolumes(h.ctx(), &csi.ListVolumesRequest{MaxEntries: 2})
		must("list volumes", err)
		_, err = h.svc.ListSnapshots(h.ctx(), &csi.ListSnapshotsRequest{SourceVolumeId: vol.VolumeId})
		must("list snapshots", err)
		must("unpublish", h.unpublish(vol.VolumeId, node))
		_, err = h.svc.DeleteSnapshot(h.ctx(), &csi.DeleteSnapshotRequest{SnapshotId: snap.SnapshotId})
		must("delete snapshot", err)
	}
	for _, vol := range vols {
		_, err := h.svc.DeleteVolume(h.ctx(), &csi.DeleteVolumeRequest{VolumeId: vol.VolumeId})
		must("delete volume", err)
	}
	failed := 0
	for _, a := range []string{"CreateVolume", "DescribeVolumes", "AttachVolume", "DetachVolume", "ModifyVolume",
		"DescribeVolumesModifications", "CreateSnapshot", "DescribeSnapshots", "DeleteSnapshot", "DeleteVolume", "CreateTags", "DescribeInstances"} {
		failed += h.env.CallsWithCode(a, faults.CodeInternalError) + h.env.CallsWithCode(a, faults.CodeUnavailable)
	}
	if failed == 0 {
		t.Fatal("no EC2 call failed: the test proves nothing")
	}
	t.Logf("survived %d failed EC2 calls", failed)
	eventually(t, "every volume to be deleted", func() bool { return len(h.volumes()) == 0 })
}

// TestConcurrentDuplicatesAreAborted holds each RPC's in-flight key, as a
// first request still running would, and checks that the duplicate is
// Aborted at once without calling the cloud.
func TestConcurrentDuplicatesAreAborted(t *testing.T) {
	h := newHarness(t, emulatortest.Options{}, Options{})
	node := h.env.LocalInstance().ID
	vol := h.createVolume(t, createReq("pvc-dup", 1, h.env.Zone()))
	snap := h.snapshot(t, "snap-dup", vol.VolumeId, nil)
	tests := []struct {
		name string
		key  inflight.Key
		call func(ctx context.Context) error
	}{
		{"CreateVolume", inflight.VolumeName("pvc-dup-2"), func(ctx context.Context) error {
			_, err := h.svc.CreateVolume(ctx, createReq("pvc-dup-2", 1, ""))
			return err
		}},
		{"ControllerPublishVolume", inflight.Attachment(vol.VolumeId, node), func(ctx context.Context) error {
			_, err := h.svc.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: vol.VolumeId, NodeId: node, VolumeCapability: rwo})
			return err
		}},
		{"ControllerUnpublishVolume", inflight.Attachment(vol.VolumeId, node), func(ctx context.Context) error {
			_, err := h.svc.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: vol.VolumeId, NodeId: node})
			return err
		}},
		{"CreateSnapshot", inflight.SnapshotName("snap-dup-2"), func(ctx context.Context) error {
			_, err := h.svc.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-dup-2", SourceVolumeId: vol.VolumeId})
			return err
		}},
		{"DeleteSnapshot", inflight.Snapshot(snap.SnapshotId), func(ctx context.Context) error {
			_, err := h.svc.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: snap.SnapshotId})
			return err
		}},
		{"DeleteVolume", inflight.Volume(vol.VolumeId), func(ctx context.Context) error {
			_, err := h.svc.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: vol.VolumeId})
			return err
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			release, ok := h.svc.inFlight.TryAcquire(tc.key)
			if !ok {
				t.Fatalf("%v is already held", tc.key)
			}
			before := h.mutatingCalls()
			err := tc.call(h.ctx())
			release()
			wantCode(t, err, codes.Aborted, "already in progress")
			if h.mutatingCalls() != before {
				t.Fatal("an Aborted request changed the cloud")
			}
			if err := tc.call(h.ctx()); err != nil {
				t.Fatalf("once the first finished, the retry must work: %v", err)
			}
		})
	}
}

// TestStuckAttachContinuesOnRetry leaves an attachment "attaching" past the
// caller's deadline: the RPC says DeadlineExceeded, and the retry, once EC2
// finishes, waits for that same attachment instead of making another.
func TestStuckAttachContinuesOnRetry(t *testing.T) {
	h := newHarness(t, emulatortest.Options{Faults: faults.Config{StuckAttach: faults.StuckAttach{Next: 1}}}, Options{})
	node := h.env.LocalInstance().ID
	vol := h.createVolume(t, createReq("pvc-stuck", 1, h.env.Zone()))

	// Long enough for AttachVolume itself on the slowest runner (the arm64
	// tests under qemu-user): the deadline must end the wait, not the call.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := h.svc.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: vol.VolumeId, NodeId: node, VolumeCapability: rwo})
	wantCode(t, err, codes.DeadlineExceeded, "")

	h.env.Cloud().ReleaseStuckAttachments()
	if _, err := h.publish(vol.VolumeId, node, rwo); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if got := h.attachedTo(t, vol.VolumeId); len(got) != 1 || got[0] != node {
		t.Fatalf("attachments %v, want one to %s", got, node)
	}
	if n := h.env.Calls("AttachVolume"); n != 1 {
		t.Fatalf("%d AttachVolume calls, want 1: the retry must wait for the first attachment", n)
	}
}

// TestRetryWithOtherSizeWhileCreating retries a create whose first attempt
// is still "creating" in the cloud, but with another size: AlreadyExists,
// never a second volume under the same name.
func TestRetryWithOtherSizeWhileCreating(t *testing.T) {
	h := newHarness(t, emulatortest.Options{Latencies: model.Latencies{VolumeCreate: 2 * time.Second}}, Options{})
	interrupt(t, h, "CreateVolume", func(ctx context.Context) error {
		_, err := h.svc.CreateVolume(ctx, createReq("pvc-growing", 10, h.env.Zone()))
		return err
	})
	other := createReq("pvc-growing", 20, h.env.Zone())
	other.CapacityRange.LimitBytes = 20 * GiB
	_, err := h.svc.CreateVolume(h.ctx(), other)
	wantCode(t, err, codes.AlreadyExists, "size 10 GiB")
	if vols := h.volumes(); len(vols) != 1 {
		t.Fatalf("%d volumes, want 1", len(vols))
	}
	// The original request still completes.
	if vol := h.createVolume(t, createReq("pvc-growing", 10, h.env.Zone())); vol.GetCapacityBytes() != 10*GiB {
		t.Fatalf("volume %v", vol)
	}
}

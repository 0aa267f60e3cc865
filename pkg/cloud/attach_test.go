package cloud

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/diskplane/diskplane/pkg/cloud/devicenames"
	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/faults"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

// twoInstances declares the local instance and a second one in the same
// zone, plus one in another zone (backend.instance 0, 1 and 2; moto picks
// IDs of its own).
func twoInstances() emulatortest.Options {
	return emulatortest.Options{Instances: []model.InstanceSpec{
		{ID: "i-0000000000000000a", Zone: "us-east-1a", Local: true},
		{ID: "i-0000000000000000b", Zone: "us-east-1a"},
		{ID: "i-0000000000000000c", Zone: "us-east-1b"},
	}}
}

func TestAttachVolume(t *testing.T) {
	t.Parallel()
	c, env := start(t, twoInstances())
	instanceA, instanceB, instanceOther := env.instance(0), env.instance(1), env.instance(2)
	zoneA := &CreateVolumeOptions{SizeGiB: 1, Zone: "us-east-1a"}
	vol := mustCreate(t, c, "pvc-1", zoneA)
	shared := mustCreate(t, c, "pvc-shared", &CreateVolumeOptions{SizeGiB: 10, Zone: "us-east-1a", Type: VolumeTypeIO2, IOPS: 1000, MultiAttach: true})

	device, err := c.AttachVolume(testContext(t), vol.ID, instanceA, AttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(devicenames.Candidates(), device) {
		t.Errorf("device %q is not one of the allocator's names", device)
	}
	again, err := c.AttachVolume(testContext(t), vol.ID, instanceA, AttachOptions{})
	if err != nil || again != device {
		t.Fatalf("attaching again = %q, %v; want %q", again, err, device)
	}
	if n := env.Calls("AttachVolume"); n != 1 {
		t.Errorf("%d AttachVolume calls; attaching what is attached must not call EC2 again", n)
	}
	inst, err := c.GetInstance(testContext(t), instanceA)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(inst.DeviceNames, device) || inst.AttachedVolumes != 2 || inst.Type != "m5.large" || inst.Zone != "us-east-1a" {
		t.Errorf("instance %+v: want %s among 2 attachments (root included)", inst, device)
	}

	t.Run("attached elsewhere", func(t *testing.T) {
		_, err := c.AttachVolume(testContext(t), vol.ID, instanceB, AttachOptions{})
		var elsewhere *AttachedElsewhereError
		if !errors.As(err, &elsewhere) || !errors.Is(err, ErrAttachedElsewhere) {
			t.Fatalf("err = %v, want an AttachedElsewhereError", err)
		}
		if !slices.Equal(elsewhere.InstanceIDs, []string{instanceA}) || elsewhere.VolumeID != vol.ID {
			t.Errorf("error names %+v", elsewhere)
		}
	})
	t.Run("multi-attach", func(t *testing.T) {
		emulatorOnly(t, "keeps one attachment per volume: AttachVolume of an attached multi-attach volume replaces its attachment")
		if _, err := c.AttachVolume(testContext(t), shared.ID, instanceA, AttachOptions{}); err != nil {
			t.Fatalf("attach to %s: %v", instanceA, err)
		}
		// Not shared: one instance at a time, multi-attach or not.
		_, err := c.AttachVolume(testContext(t), shared.ID, instanceB, AttachOptions{})
		wantErr(t, err, ErrAttachedElsewhere)
		if _, err := c.AttachVolume(testContext(t), shared.ID, instanceB, AttachOptions{Shared: true}); err != nil {
			t.Fatalf("attach to %s, shared: %v", instanceB, err)
		}
		got, err := c.GetVolume(testContext(t), shared.ID)
		if err != nil || len(got.Attachments) != 2 {
			t.Fatalf("volume %+v, %v: want two attachments", got, err)
		}
	})

	errorCases := []struct {
		name      string
		volume    func() string
		instance  string
		want      error
		motoLacks string
	}{
		{"missing volume", func() string { return "vol-0123456789abcdef0" }, instanceA, ErrNotFound, ""},
		{"missing instance", func() string { return mustCreate(t, c, "pvc-2", zoneA).ID }, "i-0123456789abcdef0", ErrNotFound, ""},
		{"other zone", func() string { return mustCreate(t, c, "pvc-3", zoneA).ID }, instanceOther, ErrInvalidArgument,
			"attaches a volume to an instance in another zone (EC2: InvalidVolume.ZoneMismatch)"},
	}
	for _, tc := range errorCases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.motoLacks != "" {
				emulatorOnly(t, tc.motoLacks)
			}
			_, err := c.AttachVolume(testContext(t), tc.volume(), tc.instance, AttachOptions{})
			wantErr(t, err, tc.want)
		})
	}
}

// TestAttachDecidesFromTheCallersRead checks that AttachVolume takes the
// caller's read of the volume instead of reading it again, and that a read
// of another volume is not taken for this one.
func TestAttachDecidesFromTheCallersRead(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// read returns the record the caller passes, given the volume made
		// for the case and another one.
		read func(vol, other *Volume) *Volume
		// wantDescribes is the DescribeVolumes calls of the attach: the
		// read, when it makes one, and the look that finds it attached (the
		// emulator's changes are instant here).
		wantDescribes int
	}{
		{name: "the caller's read", read: func(vol, _ *Volume) *Volume { return vol }, wantDescribes: 1},
		{name: "no read", read: func(_, _ *Volume) *Volume { return nil }, wantDescribes: 2},
		{name: "another volume's read", read: func(_, other *Volume) *Volume { return other }, wantDescribes: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, env := start(t, twoInstances())
			zoneA := &CreateVolumeOptions{SizeGiB: 1, Zone: "us-east-1a"}
			vol, other := mustCreate(t, c, "pvc-read", zoneA), mustCreate(t, c, "pvc-other", zoneA)
			before := env.Calls("DescribeVolumes")
			if _, err := c.AttachVolume(testContext(t), vol.ID, env.instance(0), AttachOptions{Read: tc.read(vol, other)}); err != nil {
				t.Fatal(err)
			}
			if n := env.Calls("DescribeVolumes") - before; n != tc.wantDescribes {
				t.Errorf("%d DescribeVolumes calls, want %d", n, tc.wantDescribes)
			}
			if n := env.Calls("AttachVolume"); n != 1 {
				t.Errorf("%d AttachVolume calls, want 1", n)
			}
		})
	}
}

func TestAttachAwaitsAttachmentInProgress(t *testing.T) {
	t.Parallel()
	c, env := startEmulator(t, emulatortest.Options{Latencies: model.Latencies{Attach: 300 * time.Millisecond}},
		"has no attaching phase: a volume is attached as AttachVolume answers")
	vol := mustCreate(t, c, "pvc-1", &CreateVolumeOptions{SizeGiB: 1, Zone: env.Zone()})
	inst := env.LocalInstance().ID
	if _, err := rawClient(env).AttachVolume(testContext(t), &ec2.AttachVolumeInput{
		VolumeId: aws.String(vol.ID), InstanceId: aws.String(inst), Device: aws.String("/dev/xvdzz"),
	}); err != nil {
		t.Fatal(err)
	}
	device, err := c.AttachVolume(testContext(t), vol.ID, inst, AttachOptions{})
	if err != nil || device != "/dev/xvdzz" {
		t.Fatalf("AttachVolume = %q, %v; want the attachment in progress, /dev/xvdzz", device, err)
	}
	if n := env.Calls("AttachVolume"); n != 1 {
		t.Errorf("%d AttachVolume calls; the one in progress should have been awaited", n)
	}
}

// TestAttachRetriesDeviceNameInUse runs two controllers (say, two leaders
// overlapping during a failover) that pick the same device name for two
// volumes on one instance: EC2 refuses the second, which takes another name.
func TestAttachRetriesDeviceNameInUse(t *testing.T) {
	t.Parallel()
	emulatorOnly(t, "has no latency to inject and never refuses a device name in use (a second attachment as the same device replaces the first in the instance's mapping)")
	env := emulatortest.Start(t, emulatortest.Options{Faults: faults.Config{
		Latency: map[string]faults.Duration{"AttachVolume": faults.Duration(2 * time.Second)},
	}})
	first, second := newCloud(t, env, testConfig()), newCloud(t, env, testConfig())
	inst := env.LocalInstance().ID
	vols := []string{
		mustCreate(t, first, "pvc-1", &CreateVolumeOptions{SizeGiB: 1, Zone: env.Zone()}).ID,
		mustCreate(t, first, "pvc-2", &CreateVolumeOptions{SizeGiB: 1, Zone: env.Zone()}).ID,
	}
	devices := make([]string, 2)
	var wg sync.WaitGroup
	for i, c := range []Cloud{first, second} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := c.AttachVolume(testContext(t), vols[i], inst, AttachOptions{})
			if err != nil {
				t.Error(err)
			}
			devices[i] = d
		}()
	}
	wg.Wait()
	if devices[0] == devices[1] {
		t.Fatalf("both volumes attached as %s", devices[0])
	}
	if n := env.CallsWithCode("AttachVolume", "InvalidParameterValue"); n != 1 {
		t.Errorf("%d refused attaches, want exactly 1 (the test relies on both picking the same name)", n)
	}
}

// TestConcurrentAttachesToOneInstance: attaches that overlap on one
// instance all see the same DescribeInstances answer, in which none of the
// others' names shows yet; the allocator must still give each its own name,
// accepted by EC2 on the first try. (That a held name is skipped even after
// the round-robin wraps is the allocator's own test.)
func TestConcurrentAttachesToOneInstance(t *testing.T) {
	t.Parallel()
	c, env := startEmulator(t, emulatortest.Options{Latencies: model.Latencies{Attach: 200 * time.Millisecond}},
		"has no attaching phase, so attaches to one instance do not overlap, and never refuses a device name in use")
	inst := env.LocalInstance().ID
	const n = 12
	vols := make([]string, n)
	for i := range n {
		vols[i] = mustCreate(t, c, fmt.Sprintf("pvc-%d", i), &CreateVolumeOptions{SizeGiB: 1, Zone: env.Zone()}).ID
	}
	devices := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := c.AttachVolume(testContext(t), vols[i], inst, AttachOptions{})
			if err != nil {
				t.Errorf("attach %s: %v", vols[i], err)
			}
			devices[i] = d
		}()
	}
	wg.Wait()
	distinct := map[string]bool{}
	for _, d := range devices {
		distinct[d] = true
	}
	if len(distinct) != n {
		t.Errorf("%d concurrent attaches got %d distinct device names: %v", n, len(distinct), devices)
	}
	if calls, refused := env.Calls("AttachVolume"), env.CallsWithCode("AttachVolume", "InvalidParameterValue"); calls != n || refused != 0 {
		t.Errorf("%d AttachVolume calls of which %d refused; want %d, none refused", calls, refused, n)
	}
	got, err := c.GetInstance(testContext(t), inst)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devices {
		if !slices.Contains(got.DeviceNames, d) {
			t.Errorf("the instance does not list %s among %v", d, got.DeviceNames)
		}
	}
}

func TestStuckAttachIsDetached(t *testing.T) {
	t.Parallel()
	emulatorOnly(t, "cannot leave an attachment stuck in attaching")
	env := emulatortest.Start(t, emulatortest.Options{Faults: faults.Config{StuckAttach: faults.StuckAttach{Next: 1}}})
	cfg := testConfig()
	cfg.AttachStuckTimeout = 200 * time.Millisecond
	c := newCloud(t, env, cfg)
	vol := mustCreate(t, c, "pvc-1", &CreateVolumeOptions{SizeGiB: 1, Zone: env.Zone()})
	inst := env.LocalInstance().ID
	_, err := c.AttachVolume(testContext(t), vol.ID, inst, AttachOptions{})
	wantErr(t, err, ErrUnavailable)
	if n := env.Calls("DetachVolume"); n != 1 {
		t.Fatalf("%d DetachVolume calls; the stuck attachment should have been detached", n)
	}
	device, err := c.AttachVolume(testContext(t), vol.ID, inst, AttachOptions{})
	if err != nil {
		t.Fatalf("the retry after a stuck attach failed: %v", err)
	}
	got, err := c.GetVolume(testContext(t), vol.ID)
	if err != nil || len(got.Attachments) != 1 || got.Attachments[0].State != AttachmentAttached || got.Attachments[0].DevicePath != device {
		t.Errorf("after the retry: %+v, %v", got, err)
	}
}

func TestAttachmentLimit(t *testing.T) {
	t.Parallel()
	c, env := startEmulator(t, emulatortest.Options{Instances: []model.InstanceSpec{{Type: "m5.large", NetworkInterfaces: 3, Local: true}}},
		"does not enforce an instance's attachment limit (AttachmentLimitExceeded)")
	inst := env.LocalInstance().ID
	// 28 shared slots: the root volume and three network interfaces take 4.
	for i := range 24 {
		v := mustCreate(t, c, fmt.Sprintf("pvc-%d", i), &CreateVolumeOptions{SizeGiB: 1, Zone: env.Zone()})
		if _, err := c.AttachVolume(testContext(t), v.ID, inst, AttachOptions{}); err != nil {
			t.Fatalf("attachment %d: %v", i, err)
		}
	}
	v := mustCreate(t, c, "pvc-full", &CreateVolumeOptions{SizeGiB: 1, Zone: env.Zone()})
	_, err := c.AttachVolume(testContext(t), v.ID, inst, AttachOptions{})
	wantErr(t, err, ErrLimitExceeded)
}

func TestDetachVolume(t *testing.T) {
	t.Parallel()
	c, env := start(t, twoInstances())
	instanceA, instanceB := env.instance(0), env.instance(1)
	zoneA := &CreateVolumeOptions{SizeGiB: 1, Zone: "us-east-1a"}
	attached := mustCreate(t, c, "pvc-1", zoneA)
	onB := mustCreate(t, c, "pvc-2", zoneA)
	for _, a := range []struct{ vol, inst string }{{attached.ID, instanceA}, {onB.ID, instanceB}} {
		if _, err := c.AttachVolume(testContext(t), a.vol, a.inst, AttachOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name     string
		volume   string
		instance string
		want     error
	}{
		{"attached", attached.ID, instanceA, nil},
		{"already detached", attached.ID, instanceA, ErrNotFound},
		{"attached to another instance", onB.ID, instanceA, ErrNotFound},
		{"missing volume", "vol-0123456789abcdef0", instanceA, ErrNotFound},
		{"missing instance", onB.ID, "i-0123456789abcdef0", ErrNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantErr(t, c.DetachVolume(testContext(t), tc.volume, tc.instance), tc.want)
		})
	}
	got, err := c.GetVolume(testContext(t), attached.ID)
	if err != nil || got.State != volumeAvailable || len(got.Attachments) != 0 {
		t.Errorf("after detaching: %+v, %v", got, err)
	}
}

func TestDetachWaitsUntilDetached(t *testing.T) {
	t.Parallel()
	c, env := startEmulator(t, emulatortest.Options{Latencies: model.Latencies{Detach: 300 * time.Millisecond}},
		"has no detaching phase: a volume is detached as DetachVolume answers")
	vol := mustCreate(t, c, "pvc-1", &CreateVolumeOptions{SizeGiB: 1, Zone: env.Zone()})
	inst := env.LocalInstance().ID
	if _, err := c.AttachVolume(testContext(t), vol.ID, inst, AttachOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.DetachVolume(testContext(t), vol.ID, inst); err != nil {
		t.Fatal(err)
	}
	for _, v := range env.Cloud().Volumes() {
		if v.ID == vol.ID && (v.State != model.VolumeAvailable || len(v.Attachments) != 0) {
			t.Errorf("DetachVolume returned while the volume is %s with %d attachments", v.State, len(v.Attachments))
		}
	}
	// A detach that is already running is awaited, not refused.
	if _, err := c.AttachVolume(testContext(t), vol.ID, inst, AttachOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rawClient(env).DetachVolume(testContext(t), &ec2.DetachVolumeInput{VolumeId: aws.String(vol.ID)}); err != nil {
		t.Fatal(err)
	}
	if err := c.DetachVolume(testContext(t), vol.ID, inst); err != nil {
		t.Errorf("detaching a volume that is detaching: %v", err)
	}
}

// TestAttachAfterAPredecessorAttachedElsewhere: a controller sent
// AttachVolume of a multi-attach volume to one instance and was killed; its
// successor, just started, is asked to attach the volume to another for one
// node at a time while EC2's reads lag behind the attachment. EC2 would
// allow the second attachment, so the successor must not trust a read that
// shows none before the visibility window after its start: it refuses or
// asks to be retried, and the volume stays attached to the first instance
// alone.
func TestAttachAfterAPredecessorAttachedElsewhere(t *testing.T) {
	t.Parallel()
	emulatorOnly(t, motoLacksFaults)
	const first, second = "i-00000000000000001", "i-00000000000000002"
	env := emulatortest.Start(t, emulatortest.Options{Instances: []model.InstanceSpec{
		{ID: first, Zone: "us-east-1a"}, {ID: second, Zone: "us-east-1a"},
	}})
	vol := mustCreate(t, newCloud(t, env, testConfig()), "pvc-shared",
		&CreateVolumeOptions{SizeGiB: 10, Zone: "us-east-1a", Type: VolumeTypeIO2, IOPS: 1000, MultiAttach: true})
	// From now on every read sees the cloud as it was a moment up to a
	// minute ago: almost always before the attachment below.
	if err := env.Faults().Patch([]byte(`{"staleReads": {"maxLag": "1m", "probability": 1}}`)); err != nil {
		t.Fatal(err)
	}
	// The predecessor's request, whose answer it did not live to see.
	if _, err := rawClient(env).AttachVolume(testContext(t), &ec2.AttachVolumeInput{
		VolumeId: aws.String(vol.ID), InstanceId: aws.String(first), Device: aws.String("/dev/xvdba")}); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.VisibilityTimeout = time.Hour
	successor := newCloud(t, env, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := successor.AttachVolume(ctx, vol.ID, second, AttachOptions{})
	if !errors.Is(err, ErrRetryLater) && !errors.Is(err, ErrAttachedElsewhere) {
		t.Fatalf("the successor's attach: %v, want it refused or to be retried later", err)
	}
	if err := env.Faults().Patch([]byte(`{"staleReads": {"maxLag": "0s", "probability": 0}}`)); err != nil {
		t.Fatal(err)
	}
	got, err := successor.GetVolume(testContext(t), vol.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Attachments) != 1 || got.Attachments[0].InstanceID != first {
		t.Fatalf("attachments %+v: want only the predecessor's, to %s", got.Attachments, first)
	}
}

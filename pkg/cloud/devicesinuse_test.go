package cloud

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/diskplane/diskplane/pkg/cloud/devicenames"
	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
)

func TestDevicesInUse(t *testing.T) {
	t.Parallel()
	errRead := errors.New("DescribeInstances failed")
	type step struct {
		after  time.Duration // since the previous step
		forget bool          // drop the view first
		fail   bool          // the read fails
		// wantRead is whether the step reads the instance; wantNames the
		// names it returns.
		wantRead  bool
		wantNames []string
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{name: "a view within its TTL is reused", steps: []step{
			{wantRead: true, wantNames: []string{"/dev/xvda", "n1"}},
			{after: 59 * time.Second, wantNames: []string{"/dev/xvda", "n1"}},
		}},
		{name: "an expired view is read again", steps: []step{
			{wantRead: true, wantNames: []string{"/dev/xvda", "n1"}},
			{after: time.Minute, wantRead: true, wantNames: []string{"/dev/xvda", "n2"}},
			{after: time.Second, wantNames: []string{"/dev/xvda", "n2"}},
		}},
		{name: "a forgotten view is read again", steps: []step{
			{wantRead: true, wantNames: []string{"/dev/xvda", "n1"}},
			{forget: true, wantRead: true, wantNames: []string{"/dev/xvda", "n2"}},
		}},
		{name: "a failed read leaves no view", steps: []step{
			{wantRead: true, wantNames: []string{"/dev/xvda", "n1"}},
			{forget: true, fail: true, wantRead: true},
			{wantRead: true, wantNames: []string{"/dev/xvda", "n3"}},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			now := time.Unix(1_700_000_000, 0)
			d := newDevicesInUse(time.Minute)
			d.now = func() time.Time { return now }
			reads := 0
			for i, s := range tc.steps {
				now = now.Add(s.after)
				if s.forget {
					d.forget("i-1")
				}
				read := false
				names, fresh, err := d.names(context.Background(), "i-1", func(context.Context) ([]string, error) {
					read, reads = true, reads+1
					if s.fail {
						return nil, errRead
					}
					return []string{"/dev/xvda", "n" + string(rune('0'+reads))}, nil
				})
				if read != s.wantRead || fresh != s.wantRead {
					t.Errorf("step %d: read %v, fresh %v; want %v", i, read, fresh, s.wantRead)
				}
				if s.fail {
					if !errors.Is(err, errRead) {
						t.Errorf("step %d: err %v, want the read's", i, err)
					}
					continue
				}
				if err != nil || !slices.Equal(names, s.wantNames) {
					t.Errorf("step %d: names %v, %v; want %v", i, names, err, s.wantNames)
				}
			}
			if _, ok := d.view("i-2"); ok {
				t.Error("another instance has a view it never read")
			}
		})
	}
}

// TestAttachesReuseTheInstancesDeviceNames: attaches to one instance one
// after another read it once; another instance is read for its own.
func TestAttachesReuseTheInstancesDeviceNames(t *testing.T) {
	t.Parallel()
	c, env := start(t, twoInstances())
	zoneA := &CreateVolumeOptions{SizeGiB: 1, Zone: "us-east-1a"}
	var devices []string
	for i, instance := range []string{env.instance(0), env.instance(0), env.instance(0), env.instance(1)} {
		vol := mustCreate(t, c, "pvc-names-"+string(rune('a'+i)), zoneA)
		device, err := c.AttachVolume(testContext(t), vol.ID, instance, AttachOptions{})
		if err != nil {
			t.Fatal(err)
		}
		devices = append(devices, device)
	}
	if n := env.Calls("DescribeInstances"); n != 2 {
		t.Errorf("%d DescribeInstances calls for three attaches to one instance and one to another, want 2", n)
	}
	if devices[0] == devices[1] || devices[1] == devices[2] || devices[0] == devices[2] {
		t.Errorf("attaches to one instance shared a device name: %v", devices[:3])
	}
}

// TestAttachAfterANameTakenOutsideTheView: a volume attached to the
// instance by another hand after the controller read it takes the name the
// controller hands out next. EC2 refuses that name; the attach reads the
// instance again and takes another.
func TestAttachAfterANameTakenOutsideTheView(t *testing.T) {
	t.Parallel()
	c, env := startEmulator(t, emulatortest.Options{}, "never refuses a device name in use")
	inst := env.LocalInstance().ID
	zone := &CreateVolumeOptions{SizeGiB: 1, Zone: env.Zone()}
	first := mustCreate(t, c, "pvc-first", zone)
	device, err := c.AttachVolume(testContext(t), first.ID, inst, AttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The allocator hands names out round-robin: the next is the one after.
	names := devicenames.Candidates()
	i := slices.Index(names, device)
	if i < 0 || i+1 == len(names) {
		t.Fatalf("device %s is not a candidate with one after it", device)
	}
	next := names[i+1]
	other := mustCreate(t, c, "pvc-by-hand", zone)
	if _, err := rawClient(env).AttachVolume(testContext(t), &ec2.AttachVolumeInput{
		VolumeId: aws.String(other.ID), InstanceId: aws.String(inst), Device: aws.String(next),
	}); err != nil {
		t.Fatal(err)
	}
	second := mustCreate(t, c, "pvc-second", zone)
	got, err := c.AttachVolume(testContext(t), second.ID, inst, AttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got == next || got == device {
		t.Errorf("attached as %s; %s and %s are taken", got, device, next)
	}
	if n := env.CallsWithCode("AttachVolume", "InvalidParameterValue"); n != 1 {
		t.Errorf("%d attaches refused, want 1 (the name the stale view showed free)", n)
	}
	if n := env.Calls("DescribeInstances"); n != 2 {
		t.Errorf("%d DescribeInstances calls, want 2: the first attach's and the read after the refusal", n)
	}
}

// TestAttachReadsAgainWhenTheViewHasNoFreeName: a view that shows every
// name taken (names freed since it was read) does not fail the attach; the
// instance is read again.
func TestAttachReadsAgainWhenTheViewHasNoFreeName(t *testing.T) {
	t.Parallel()
	c, env := start(t, twoInstances())
	inst := env.instance(0)
	vol := mustCreate(t, c, "pvc-full-view", &CreateVolumeOptions{SizeGiB: 1, Zone: "us-east-1a"})
	c.inUse.mu.Lock()
	c.inUse.views[inst] = instanceDevices{names: devicenames.Candidates(), read: time.Now()}
	c.inUse.mu.Unlock()
	if _, err := c.AttachVolume(testContext(t), vol.ID, inst, AttachOptions{}); err != nil {
		t.Fatalf("attach with a view that shows every name taken: %v", err)
	}
	if n := env.Calls("DescribeInstances"); n != 1 {
		t.Errorf("%d DescribeInstances calls, want 1: the read after the full view", n)
	}
}

// TestDevicesInUseForgetsExpiredViews: the views of instances no attach
// reads any more do not pile up; a new view drops the expired ones.
func TestDevicesInUseForgetsExpiredViews(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	d := newDevicesInUse(time.Minute)
	d.now = func() time.Time { return now }
	read := func(context.Context) ([]string, error) { return []string{"/dev/xvda"}, nil }
	for _, id := range []string{"i-gone", "i-1"} {
		if _, _, err := d.names(context.Background(), id, read); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Minute)
	}
	if _, ok := d.views["i-gone"]; ok {
		t.Error("the view of an instance not read for a minute is still kept after another instance's read")
	}
	if _, ok := d.views["i-1"]; !ok {
		t.Error("the view just read is gone")
	}
}

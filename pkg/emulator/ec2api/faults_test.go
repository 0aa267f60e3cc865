package ec2api_test

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/faults"
)

func TestInjectedErrors(t *testing.T) {
	f := newFixture(t, emulatortest.Options{})
	tests := []struct {
		name string
		rule faults.ErrorRule
		want string
	}{
		{name: "internal error", rule: faults.ErrorRule{Action: "DescribeVolumes", Code: faults.CodeInternalError, Probability: 1, Count: 1}, want: "InternalError"},
		{name: "unavailable", rule: faults.ErrorRule{Action: "*", Code: faults.CodeUnavailable, Probability: 1, Count: 1}, want: "Unavailable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := f.env.Faults().Set(faults.Config{Errors: []faults.ErrorRule{tc.rule}}); err != nil {
				t.Fatal(err)
			}
			if _, err := f.client.DescribeVolumes(f.ctx, &ec2.DescribeVolumesInput{}); apiCode(err) != tc.want {
				t.Fatalf("first call: %v, want %s", err, tc.want)
			}
			if _, err := f.client.DescribeVolumes(f.ctx, &ec2.DescribeVolumesInput{}); err != nil {
				t.Fatalf("second call after a count of 1: %v", err)
			}
			if n := f.env.CallsWithCode("DescribeVolumes", tc.want); n != 1 {
				t.Fatalf("%d %s answers counted, want 1", n, tc.want)
			}
		})
	}
}

func TestSDKRetriesInjectedErrors(t *testing.T) {
	env := emulatortest.Start(t, emulatortest.Options{Faults: faults.Config{Errors: []faults.ErrorRule{
		{Action: "CreateVolume", Code: faults.CodeInternalError, Probability: 1, Count: 2},
	}}})
	client := env.EC2Client(func(o *ec2.Options) {
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.MaxAttempts = 5
			so.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return 0, nil })
		})
	})
	out, err := client.CreateVolume(t.Context(), &ec2.CreateVolumeInput{AvailabilityZone: aws.String(env.Zone()), Size: aws.Int32(1), ClientToken: aws.String("t")})
	if err != nil {
		t.Fatalf("CreateVolume with retries: %v", err)
	}
	if got := env.Calls("CreateVolume"); got != 3 {
		t.Fatalf("%d CreateVolume requests, want 3 (two failures, one success)", got)
	}
	if n := len(env.Cloud().Volumes()); n != 2 || aws.ToString(out.VolumeId) == "" {
		t.Fatalf("%d volumes, want root + 1", n)
	}
}

func TestThrottling(t *testing.T) {
	throttle := faults.EC2Throttle()
	throttle.Mutating = faults.Bucket{Size: 2, RefillPerSecond: 0.001}
	throttle.Describe = faults.Bucket{Size: 3, RefillPerSecond: 0.001}
	f := newFixture(t, emulatortest.Options{Faults: faults.Config{Throttle: throttle}})
	for i := range 3 {
		_, err := f.client.CreateVolume(f.ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String(f.zone), Size: aws.Int32(1)})
		if want := map[bool]string{true: "", false: "RequestLimitExceeded"}[i < 2]; apiCode(err) != want {
			t.Fatalf("CreateVolume %d: %v, want %q", i+1, err, want)
		}
	}
	// Another action has its own bucket.
	for i := range 4 {
		_, err := f.client.DescribeVolumes(f.ctx, &ec2.DescribeVolumesInput{MaxResults: aws.Int32(5)})
		if want := map[bool]string{true: "", false: "RequestLimitExceeded"}[i < 3]; apiCode(err) != want {
			t.Fatalf("DescribeVolumes %d: %v, want %q", i+1, err, want)
		}
	}
	if n := f.env.CallsWithCode("CreateVolume", "RequestLimitExceeded"); n != 1 {
		t.Fatalf("%d throttled CreateVolume counted, want 1", n)
	}
}

func TestUnauthorizedOperation(t *testing.T) {
	f := newFixture(t, emulatortest.Options{Faults: faults.Config{Unauthorized: []string{"DescribeAvailabilityZones"}}})
	// The driver's Probe: a dry run answers UnauthorizedOperation without
	// permission and DryRunOperation with it.
	if _, err := f.client.DescribeAvailabilityZones(f.ctx, &ec2.DescribeAvailabilityZonesInput{DryRun: aws.Bool(true)}); apiCode(err) != "UnauthorizedOperation" {
		t.Fatalf("dry run without permission: %v", err)
	}
	if err := f.env.Faults().Set(faults.Config{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.DescribeAvailabilityZones(f.ctx, &ec2.DescribeAvailabilityZonesInput{DryRun: aws.Bool(true)}); apiCode(err) != "DryRunOperation" {
		t.Fatalf("dry run with permission: %v", err)
	}
}

func TestEventualConsistency(t *testing.T) {
	f := newFixture(t, emulatortest.Options{Faults: faults.Config{EventualConsistency: faults.Duration(time.Hour)}})
	out, err := f.client.CreateVolume(f.ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String(f.zone), Size: aws.Int32(1)})
	if err != nil {
		t.Fatal(err)
	}
	id := aws.ToString(out.VolumeId)
	if _, err := f.client.DescribeVolumes(f.ctx, &ec2.DescribeVolumesInput{VolumeIds: []string{id}}); apiCode(err) != "InvalidVolume.NotFound" {
		t.Fatalf("new volume described by ID: %v", err)
	}
	list, err := f.client.DescribeVolumes(f.ctx, &ec2.DescribeVolumesInput{Filters: []types.Filter{filter("volume-id", id)}})
	if err != nil || len(list.Volumes) != 0 {
		t.Fatalf("new volume listed: %d, %v", len(list.Volumes), err)
	}
	// Only Describe* is affected: the volume can be used at once.
	if _, err := f.client.CreateTags(f.ctx, &ec2.CreateTagsInput{Resources: []string{id}, Tags: []types.Tag{tag("a", "b")}}); err != nil {
		t.Fatalf("CreateTags on a new volume: %v", err)
	}
	if _, err := f.client.AttachVolume(f.ctx, &ec2.AttachVolumeInput{VolumeId: out.VolumeId, InstanceId: aws.String(f.local), Device: aws.String("/dev/sdf")}); err != nil {
		t.Fatalf("AttachVolume of a new volume: %v", err)
	}
	if err := f.env.Faults().Patch([]byte(`{"eventualConsistency":"0s"}`)); err != nil {
		t.Fatal(err)
	}
	if v := f.get(t, id); aws.ToString(v.Tags[0].Key) != "a" {
		t.Fatalf("volume once consistent: %+v", v)
	}
}

func TestStuckAttach(t *testing.T) {
	f := newFixture(t, emulatortest.Options{Faults: faults.Config{StuckAttach: faults.StuckAttach{Next: 1}}})
	stuck, fine := f.volume(t, 1), f.volume(t, 1)
	for _, id := range []string{stuck, fine} {
		if _, err := f.client.AttachVolume(f.ctx, &ec2.AttachVolumeInput{VolumeId: aws.String(id), InstanceId: aws.String(f.local), Device: aws.String("/dev/sd" + map[string]string{stuck: "f", fine: "g"}[id])}); err != nil {
			t.Fatal(err)
		}
	}
	f.waitAttachment(t, fine, f.local, types.VolumeAttachmentStateAttached)
	if a := f.get(t, stuck).Attachments[0]; a.State != types.VolumeAttachmentStateAttaching {
		t.Fatalf("stuck attachment is %s", a.State)
	}
	// A stuck attachment can be detached, as on EC2.
	if _, err := f.client.DetachVolume(f.ctx, &ec2.DetachVolumeInput{VolumeId: aws.String(stuck)}); err != nil {
		t.Fatal(err)
	}
	f.waitAttachment(t, stuck, f.local, types.VolumeAttachmentStateDetached)
}

func TestAddedLatencyIsMeasured(t *testing.T) {
	f := newFixture(t, emulatortest.Options{Faults: faults.Config{Latency: map[string]faults.Duration{"DescribeInstances": faults.Duration(20 * time.Millisecond)}}})
	start := time.Now()
	if _, err := f.client.DescribeInstances(f.ctx, &ec2.DescribeInstancesInput{}); err != nil {
		t.Fatal(err)
	}
	// The delay is a floor, not a speed claim: the call cannot be quicker.
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Fatalf("DescribeInstances took %v with 20ms of added latency", d)
	}
}

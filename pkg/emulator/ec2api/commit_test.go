package ec2api_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/faults"
	"github.com/diskplane/diskplane/pkg/emulator/kms"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

// TestCommitThenFail checks every way a request that was applied can fail:
// the client sees an error, a dropped connection or no answer at all, and
// the volume exists all the same.
func TestCommitThenFail(t *testing.T) {
	tests := []struct {
		mode string
		// check is what the client must see.
		check func(t *testing.T, err error)
	}{
		{mode: faults.FailInternalError, check: wantCode("InternalError")},
		{mode: faults.FailUnavailable, check: wantCode("Unavailable")},
		{mode: faults.FailReset, check: func(t *testing.T, err error) {
			var netErr net.Error
			if err == nil || (!errors.As(err, &netErr) && !strings.Contains(err.Error(), "EOF") && !strings.Contains(err.Error(), "reset")) {
				t.Fatalf("CreateVolume: %v, want the connection dropped", err)
			}
		}},
		{mode: faults.FailStall, check: func(t *testing.T, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("CreateVolume: %v, want the client's deadline", err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.mode, func(t *testing.T) {
			f := newFixture(t, emulatortest.Options{Faults: faults.Config{CommitThenFail: []faults.CommitFailRule{
				{Action: "CreateVolume", Mode: tc.mode, Probability: 1, Count: 1},
			}}})
			ctx, cancel := context.WithTimeout(f.ctx, 500*time.Millisecond)
			defer cancel()
			_, err := f.client.CreateVolume(ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String(f.zone), Size: aws.Int32(1)})
			tc.check(t, err)
			if n := len(f.env.Cloud().Volumes()); n != 2 {
				t.Fatalf("%d volumes, want the root and the one the failed request made", n)
			}
			// A stalled request is counted when the emulator notices the
			// client has gone, a moment after the client's deadline.
			for end := time.Now().Add(5 * time.Second); f.env.CallsWithCode("CreateVolume", tc.mode) == 0 && time.Now().Before(end); {
				time.Sleep(10 * time.Millisecond)
			}
			if n := f.env.CallsWithCode("CreateVolume", tc.mode); n != 1 {
				t.Errorf("%d CreateVolume requests counted as %s, want 1", n, tc.mode)
			}
			// The count is spent: the next request answers normally.
			if _, err := f.client.CreateVolume(f.ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String(f.zone), Size: aws.Int32(1)}); err != nil {
				t.Fatalf("the next CreateVolume: %v", err)
			}
		})
	}
}

func wantCode(code string) func(t *testing.T, err error) {
	return func(t *testing.T, err error) {
		t.Helper()
		if apiCode(err) != code {
			t.Fatalf("CreateVolume: %v, want %s", err, code)
		}
	}
}

func TestCommitThenFailSparesFailedRequests(t *testing.T) {
	f := newFixture(t, emulatortest.Options{Faults: faults.Config{CommitThenFail: []faults.CommitFailRule{
		{Action: "*", Mode: faults.FailInternalError, Probability: 1},
	}}})
	// A request the cloud refuses was not applied: it answers its own error.
	_, err := f.client.DeleteVolume(f.ctx, &ec2.DeleteVolumeInput{VolumeId: aws.String("vol-0123456789abcdef0")})
	if apiCode(err) != "InvalidVolume.NotFound" {
		t.Fatalf("DeleteVolume of an unknown volume: %v", err)
	}
	// Reads change nothing and are never failed by the rule.
	if _, err := f.client.DescribeVolumes(f.ctx, &ec2.DescribeVolumesInput{}); err != nil {
		t.Fatalf("DescribeVolumes: %v", err)
	}
}

func TestStaleReadsThroughTheAPI(t *testing.T) {
	f := newFixture(t, emulatortest.Options{Faults: faults.Config{
		StaleReads: faults.StaleReads{MaxLag: faults.Duration(time.Hour), Probability: 1},
	}})
	id := f.volume(t, 1)
	// Every read lags by up to an hour: most see the volume not yet there,
	// none sees it attached before the attach.
	missing := 0
	for range 20 {
		out, err := f.client.DescribeVolumes(f.ctx, &ec2.DescribeVolumesInput{VolumeIds: []string{id}})
		switch {
		case apiCode(err) == "InvalidVolume.NotFound":
			missing++
		case err != nil:
			t.Fatal(err)
		case len(out.Volumes[0].Attachments) != 0:
			t.Fatalf("a read before any attach shows %+v", out.Volumes[0].Attachments)
		}
	}
	if missing == 0 {
		t.Error("no read was stale")
	}
}

func TestClockSkew(t *testing.T) {
	for _, skew := range []time.Duration{3 * time.Minute, -3 * time.Minute} {
		f := newFixture(t, emulatortest.Options{Faults: faults.Config{ClockSkew: faults.Duration(skew)}})
		out, err := f.client.CreateVolume(f.ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String(f.zone), Size: aws.Int32(1)})
		if err != nil {
			t.Fatal(err)
		}
		if off := time.Until(aws.ToTime(out.CreateTime)); off < skew-5*time.Second || off > skew+5*time.Second {
			t.Errorf("skew %v: the volume's create time is %v off the host's clock", skew, off)
		}
	}
}

func TestAsyncFailureThroughTheAPI(t *testing.T) {
	f := newFixture(t, emulatortest.Options{Latencies: model.Latencies{VolumeDelete: 300 * time.Millisecond},
		Faults: faults.Config{UnusableKMSKeys: []string{"alias/locked"}},
		KMS:    kms.Config{Keys: []kms.KeySpec{{ID: "locked", Aliases: []string{"alias/locked"}}}}})
	out, err := f.client.CreateVolume(f.ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String(f.zone), Size: aws.Int32(1),
		Encrypted: aws.Bool(true), KmsKeyId: aws.String("alias/locked")})
	if err != nil {
		t.Fatalf("CreateVolume with an unusable key is accepted: %v", err)
	}
	// It fails at once (no creation latency) and is gone a deletion later.
	if v := f.get(t, aws.ToString(out.VolumeId)); v.State != "error" {
		t.Fatalf("state %s, want error", v.State)
	}
	time.Sleep(300 * time.Millisecond)
	if _, err := f.client.DescribeVolumes(f.ctx, &ec2.DescribeVolumesInput{VolumeIds: []string{aws.ToString(out.VolumeId)}}); apiCode(err) != "InvalidVolume.NotFound" {
		t.Fatalf("the failed volume: %v, want it gone", err)
	}
}

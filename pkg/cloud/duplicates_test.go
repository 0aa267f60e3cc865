package cloud

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/faults"
	emukms "github.com/diskplane/diskplane/pkg/emulator/kms"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

// These tests give EC2's clock an offset, lose the answers of requests that
// were applied, and make new volumes fail, and check that the cloud layer
// never makes a second volume or snapshot for one name, never detaches a
// healthy attachment, and recovers once the cause is gone.

// TestAttachUnderClockSkew: EC2's attach time is minutes off the
// controller's clock; the stuck-attach window must not count from it.
func TestAttachUnderClockSkew(t *testing.T) {
	t.Parallel()
	for _, skew := range []time.Duration{-3 * time.Minute, 3 * time.Minute} {
		t.Run(fmt.Sprint(skew), func(t *testing.T) {
			t.Parallel()
			c, env := startEmulator(t, emulatortest.Options{
				Latencies: model.Latencies{Attach: 300 * time.Millisecond},
				Faults:    faults.Config{ClockSkew: faults.Duration(skew)},
			}, motoLacksFaults)
			vol := mustCreate(t, c, "pvc-skew", &CreateVolumeOptions{SizeGiB: 1, Zone: env.Zone()})
			if _, err := c.AttachVolume(testContext(t), vol.ID, env.LocalInstance().ID, AttachOptions{}); err != nil {
				t.Fatalf("AttachVolume: %v", err)
			}
			if n := env.Calls("DetachVolume"); n != 0 {
				t.Errorf("%d DetachVolume calls: a healthy attachment was taken for a stuck one", n)
			}
		})
	}
}

// TestCreateVolumeUnderClockSkew: with EC2's clock three minutes behind, a
// new volume's create time looks older than the visibility bound; a volume
// merely not visible yet must not be taken for lost (and made again).
func TestCreateVolumeUnderClockSkew(t *testing.T) {
	t.Parallel()
	emulatorOnly(t, motoLacksFaults)
	env := emulatortest.Start(t, emulatortest.Options{Faults: faults.Config{
		ClockSkew: faults.Duration(-3 * time.Minute), EventualConsistency: faults.Duration(500 * time.Millisecond),
	}})
	cfg := testConfig()
	cfg.VisibilityTimeout = time.Minute
	if _, err := newCloud(t, env, cfg).CreateVolume(testContext(t), "pvc-late", &CreateVolumeOptions{SizeGiB: 1, Zone: env.Zone()}); err != nil {
		t.Fatal(err)
	}
	if named := namedVolumes(t, env)["pvc-late"]; len(named) != 1 {
		t.Fatalf("volumes named pvc-late: %v, want exactly one", named)
	}
}

// TestCreateVolumeRecoversFromUnusableKMSKey: every volume made with the
// key fails. The provisioner retries for a while; no attempt may end the
// token sequence for good, and once the key works (IAM fixed) the next
// attempt, in this process or a restarted one, makes the volume.
func TestCreateVolumeRecoversFromUnusableKMSKey(t *testing.T) {
	t.Parallel()
	const key = "arn:aws:kms:us-east-1:123456789012:key/locked"
	emulatorOnly(t, motoLacksFaults)
	env := emulatortest.Start(t, emulatortest.Options{
		// A failed volume stays in "error" a moment, as on EC2.
		Latencies: model.Latencies{VolumeDelete: time.Second},
		Faults:    faults.Config{UnusableKMSKeys: []string{key}},
		KMS:       emukms.Config{Keys: []emukms.KeySpec{{ID: "locked"}}},
	})
	opts := &CreateVolumeOptions{SizeGiB: 1, Zone: env.Zone(), KMSKeyID: key}
	c := newCloud(t, env, testConfig())
	for attempt := range 2 * tokensPerCall {
		_, err := c.CreateVolume(testContext(t), "pvc-kms", opts)
		if !errors.Is(err, ErrRetryLater) {
			t.Fatalf("attempt %d: %v, want an error the provisioner retries (ErrRetryLater)", attempt, err)
		}
	}
	if err := env.Faults().Patch([]byte(`{"unusableKmsKeys": []}`)); err != nil {
		t.Fatal(err)
	}
	vol := createEventually(t, c, "pvc-kms", opts)
	if again := createEventually(t, newCloud(t, env, testConfig()), "pvc-kms", opts); again.ID != vol.ID {
		t.Fatalf("a restarted controller got %s, want %s", again.ID, vol.ID)
	}
	for _, v := range env.Cloud().Volumes() {
		if v.Tags[TagVolumeName] == "pvc-kms" && v.ID != vol.ID && v.State != model.VolumeDeleting {
			t.Errorf("volume %s named pvc-kms is %s; want every failed one deleted", v.ID, v.State)
		}
	}
}

// TestCreateVolumeParameterChangeMakesNoSecondVolume: the first attempt's
// volume was made but its answer lost (the request stalled past the
// caller's deadline) and it is not visible yet; the next attempt comes
// with other parameters. Tags describe the volume (the first one is
// returned); another zone cannot be served by it (AlreadyExists). Never a
// second volume.
func TestCreateVolumeParameterChangeMakesNoSecondVolume(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		retry   CreateVolumeOptions
		wantErr error
	}{
		{name: "a tag added", retry: CreateVolumeOptions{SizeGiB: 1, Zone: "us-east-1a", Tags: map[string]string{"team": "storage"}}},
		{name: "another zone after a reschedule", retry: CreateVolumeOptions{SizeGiB: 1, Zone: "us-east-1b"}, wantErr: ErrAlreadyExists},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			emulatorOnly(t, motoLacksFaults)
			env := emulatortest.Start(t, emulatortest.Options{Faults: faults.Config{
				EventualConsistency: faults.Duration(time.Second),
				CommitThenFail:      []faults.CommitFailRule{{Action: "CreateVolume", Mode: faults.FailStall, Probability: 1, Count: 1}},
			}})
			c := newCloud(t, env, testConfig())
			ctx, cancel := context.WithTimeout(testContext(t), cutShortDeadline)
			defer cancel()
			if _, err := c.CreateVolume(ctx, "pvc-p", &CreateVolumeOptions{SizeGiB: 1, Zone: "us-east-1a"}); err == nil {
				t.Fatal("the stalled CreateVolume succeeded")
			}
			made := namedVolumes(t, env)["pvc-p"]
			if len(made) != 1 {
				t.Fatalf("the stalled request made %v", made)
			}
			retry := tc.retry
			vol, err := c.CreateVolume(testContext(t), "pvc-p", &retry)
			if errors.Is(err, ErrRetryLater) {
				// The first volume is not visible yet: asked again later.
				vol, err = nil, nil
				for ctx := testContext(t); ; time.Sleep(50 * time.Millisecond) {
					vol, err = c.CreateVolume(ctx, "pvc-p", &retry)
					if !errors.Is(err, ErrRetryLater) || ctx.Err() != nil {
						break
					}
				}
			}
			wantErr(t, err, tc.wantErr)
			if err == nil && vol.ID != made[0] {
				t.Errorf("returned %s, want the first attempt's %s", vol.ID, made[0])
			}
			if named := namedVolumes(t, env)["pvc-p"]; len(named) != 1 {
				t.Fatalf("volumes named pvc-p: %v, want only %s", named, made[0])
			}
		})
	}
}

// TestCreateSnapshotAfterCommitThenFail: EC2 made the snapshot, then the
// answer was lost. CreateSnapshot has no ClientToken: a retry, the SDK's or
// the caller's, must find the snapshot by name (which EC2 shows only after
// a while) instead of making a second one.
func TestCreateSnapshotAfterCommitThenFail(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{faults.FailInternalError, faults.FailUnavailable, faults.FailReset, faults.FailStall} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			c, env := startEmulator(t, emulatortest.Options{Faults: faults.Config{
				EventualConsistency: faults.Duration(time.Second),
			}}, motoLacksFaults)
			vol := mustCreate(t, c, "pvc-s", &CreateVolumeOptions{SizeGiB: 1, Zone: env.Zone()})
			// A new controller waits for what its predecessor may have
			// made; this test is about its own requests.
			time.Sleep(testConfig().VisibilityTimeout)
			if err := env.Faults().Patch([]byte(fmt.Sprintf(`{"commitThenFail": [{"action": "CreateSnapshot", "mode": %q, "probability": 1, "count": 1}]}`, mode))); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(testContext(t), 500*time.Millisecond)
			defer cancel()
			snap, err := c.CreateSnapshot(ctx, "snap-1", vol.ID, nil)
			if err != nil {
				// The caller's deadline ended first: it asks again.
				if snap, err = c.CreateSnapshot(testContext(t), "snap-1", vol.ID, nil); err != nil {
					t.Fatal(err)
				}
			}
			var named []string
			for _, s := range env.Cloud().Snapshots() {
				if s.Tags[TagSnapshotName] == "snap-1" {
					named = append(named, s.ID)
				}
			}
			if len(named) != 1 || named[0] != snap.ID {
				t.Fatalf("snapshots named snap-1: %v, want only the returned %s", named, snap.ID)
			}
		})
	}
}

// TestModifyVolumeAfterCommitThenFail: EC2 started the modification, then
// the answer was lost. A second ModifyVolume would be a second
// modification (here: over the volume's budget of one a day).
func TestModifyVolumeAfterCommitThenFail(t *testing.T) {
	t.Parallel()
	c, env := startEmulator(t, emulatortest.Options{ModificationsPerDay: 1, Faults: faults.Config{
		CommitThenFail: []faults.CommitFailRule{{Action: "ModifyVolume", Mode: faults.FailInternalError, Probability: 1, Count: 1}},
	}}, motoLacksFaults)
	vol := mustCreate(t, c, "pvc-m", &CreateVolumeOptions{SizeGiB: 1, Zone: env.Zone()})
	got, err := c.ModifyVolume(testContext(t), vol.ID, VolumeModification{SizeGiB: 2})
	if err != nil {
		t.Fatalf("ModifyVolume: %v", err)
	}
	if got.SizeGiB != 2 {
		t.Errorf("size %d GiB, want 2", got.SizeGiB)
	}
	if n := env.Calls("ModifyVolume"); n != 1 {
		t.Errorf("%d ModifyVolume requests, want 1", n)
	}
	out, err := rawClient(env).DescribeVolumes(testContext(t), &ec2.DescribeVolumesInput{VolumeIds: []string{vol.ID}})
	if err != nil || aws.ToInt32(out.Volumes[0].Size) != 2 {
		t.Fatalf("the volume: %+v, %v", out, err)
	}
}

// TestCreateSnapshotAgainUnderStaleReads: the snapshotter asks again until
// the snapshot is ready; a lookup that lags behind the snapshot just made
// must not make a second one.
func TestCreateSnapshotAgainUnderStaleReads(t *testing.T) {
	t.Parallel()
	c, env := startEmulator(t, emulatortest.Options{Latencies: model.Latencies{Snapshot: time.Second}}, motoLacksFaults)
	vol := mustCreate(t, c, "pvc-stale", &CreateVolumeOptions{SizeGiB: 1, Zone: env.Zone()})
	time.Sleep(testConfig().VisibilityTimeout) // past a new controller's wait for its predecessor
	if err := env.Faults().Patch([]byte(`{"staleReads": {"maxLag": "1s", "probability": 1}}`)); err != nil {
		t.Fatal(err)
	}
	first, err := c.CreateSnapshot(testContext(t), "snap-stale", vol.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		again, err := c.CreateSnapshot(testContext(t), "snap-stale", vol.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		if again.ID != first.ID {
			t.Fatalf("asked again, CreateSnapshot answered %s, first %s", again.ID, first.ID)
		}
	}
	if n := env.Calls("CreateSnapshot"); n != 1 {
		t.Errorf("%d CreateSnapshot requests, want 1", n)
	}
}

// TestCreateVolumeLostWindowCountsFromTheAnswer: CreateVolume was throttled
// for longer than the visibility window before EC2 applied it; a volume
// not visible yet right after the answer is not lost.
func TestCreateVolumeLostWindowCountsFromTheAnswer(t *testing.T) {
	t.Parallel()
	emulatorOnly(t, motoLacksFaults)
	env := emulatortest.Start(t, emulatortest.Options{Faults: faults.Config{
		EventualConsistency: faults.Duration(500 * time.Millisecond),
		Throttle: faults.Throttle{Enabled: true, Mutating: faults.Bucket{Size: 1, RefillPerSecond: 0.5},
			Describe: faults.Bucket{Size: 100, RefillPerSecond: 100}, UnfilteredDescribe: faults.Bucket{Size: 100, RefillPerSecond: 100}},
	}})
	cfg := testConfig()
	cfg.VisibilityTimeout = time.Second
	c := newCloud(t, env, cfg)
	mustCreate(t, c, "pvc-first", &CreateVolumeOptions{SizeGiB: 1, Zone: env.Zone()}) // empties the bucket
	if _, err := c.CreateVolume(testContext(t), "pvc-throttled", &CreateVolumeOptions{SizeGiB: 1, Zone: env.Zone()}); err != nil {
		t.Fatal(err)
	}
	if n := env.CallsWithCode("CreateVolume", "RequestLimitExceeded"); n == 0 {
		t.Fatal("CreateVolume was not throttled; the test means nothing")
	}
	if named := namedVolumes(t, env)["pvc-throttled"]; len(named) != 1 {
		t.Fatalf("volumes named pvc-throttled: %v, want exactly one", named)
	}
}

// TestCreateSnapshotFailedIsNotReplaced: a snapshot that failed after it
// was made is reported, not replaced under another ID (the caller may hold
// the first ID); once deleted, a new one is made.
func TestCreateSnapshotFailedIsNotReplaced(t *testing.T) {
	t.Parallel()
	c, env := startEmulator(t, emulatortest.Options{Faults: faults.Config{
		AsyncFailures: []faults.AsyncFailureRule{{Action: "CreateSnapshot", Probability: 1, Count: 1}},
	}}, motoLacksFaults)
	vol := mustCreate(t, c, "pvc-f", &CreateVolumeOptions{SizeGiB: 1, Zone: env.Zone()})
	time.Sleep(testConfig().VisibilityTimeout) // past a new controller's wait for its predecessor
	first, err := c.CreateSnapshot(testContext(t), "snap-f", vol.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateSnapshot(testContext(t), "snap-f", vol.ID, nil); !errors.Is(err, ErrUnexpected) || !strings.Contains(err.Error(), first.ID) {
		t.Fatalf("asked again after the snapshot failed: %v, want ErrUnexpected naming %s", err, first.ID)
	}
	if n := env.Calls("CreateSnapshot"); n != 1 {
		t.Fatalf("%d CreateSnapshot requests: the failed snapshot was replaced", n)
	}
	if err := c.DeleteSnapshot(testContext(t), first.ID); err != nil {
		t.Fatal(err)
	}
	var again *Snapshot
	for ctx := testContext(t); ; time.Sleep(50 * time.Millisecond) {
		if again, err = c.CreateSnapshot(ctx, "snap-f", vol.ID, nil); err == nil || ctx.Err() != nil {
			break
		}
	}
	if err != nil || again.ID == first.ID {
		t.Fatalf("after the failed snapshot was deleted: %v, %v", again, err)
	}
}

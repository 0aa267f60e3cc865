package cloud

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/faults"
)

// lifecycle runs create → attach → detach → delete for n volumes at once
// and reports every error.
func lifecycle(t *testing.T, c Cloud, instanceID string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := testContext(t)
			v, err := c.CreateVolume(ctx, fmt.Sprintf("pvc-%d", i), &CreateVolumeOptions{SizeGiB: 1, Zone: "us-east-1a"})
			if err != nil {
				t.Errorf("create %d: %v", i, err)
				return
			}
			if _, err := c.AttachVolume(ctx, v.ID, instanceID, AttachOptions{}); err != nil {
				t.Errorf("attach %s: %v", v.ID, err)
				return
			}
			if err := c.DetachVolume(ctx, v.ID, instanceID); err != nil {
				t.Errorf("detach %s: %v", v.ID, err)
				return
			}
			if err := c.DeleteVolume(ctx, v.ID); err != nil {
				t.Errorf("delete %s: %v", v.ID, err)
			}
		}()
	}
	wg.Wait()
}

// TestThrottlingOnlyDelays runs against buckets far smaller than EC2's:
// every call must still succeed, the throttling showing only as retries.
// They refill slowly enough (5 mutating calls a second for four lifecycles
// at once) that a loaded machine's slow requests still overrun them.
func TestThrottlingOnlyDelays(t *testing.T) {
	t.Parallel()
	c, env := startEmulator(t, emulatortest.Options{Faults: faults.Config{Throttle: faults.Throttle{
		Enabled:            true,
		Mutating:           faults.Bucket{Size: 2, RefillPerSecond: 5},
		Describe:           faults.Bucket{Size: 3, RefillPerSecond: 10},
		UnfilteredDescribe: faults.Bucket{Size: 3, RefillPerSecond: 10},
	}}}, motoLacksFaults)
	lifecycle(t, c, env.LocalInstance().ID, 4)
	throttled := 0
	for _, action := range []string{"CreateVolume", "AttachVolume", "DetachVolume", "DeleteVolume", "DescribeVolumes", "DescribeInstances"} {
		throttled += env.CallsWithCode(action, "RequestLimitExceeded")
	}
	if throttled == 0 {
		t.Error("nothing was throttled; the buckets are too large for the test to mean anything")
	}
	if got := c.throttledGrid(); got != c.cfg.ThrottledPollGrid {
		t.Errorf("looks aligned to %v after EC2 throttled, want the throttled grid (%v)", got, c.cfg.ThrottledPollGrid)
	}
}

// TestInjectedServerErrorsAreRetried: with a fifth of EC2's answers server
// errors and a tenth Unavailable, every lifecycle still succeeds, and the
// waits look on the coarse grid while EC2 fails requests.
func TestInjectedServerErrorsAreRetried(t *testing.T) {
	t.Parallel()
	c, env := startEmulator(t, emulatortest.Options{Faults: faults.Config{
		Seed: 7,
		Errors: []faults.ErrorRule{
			{Action: "*", Code: faults.CodeInternalError, Probability: 0.2},
			{Action: "*", Code: faults.CodeUnavailable, Probability: 0.1},
		},
	}}, motoLacksFaults)
	lifecycle(t, c, env.LocalInstance().ID, 10)
	injected := 0
	for _, action := range []string{"CreateVolume", "AttachVolume", "DetachVolume", "DeleteVolume", "DescribeVolumes", "DescribeInstances"} {
		injected += env.CallsWithCode(action, faults.CodeInternalError) + env.CallsWithCode(action, faults.CodeUnavailable)
	}
	if injected == 0 {
		t.Error("no error was injected")
	}
	if got := c.throttledGrid(); got != c.cfg.ThrottledPollGrid {
		t.Errorf("looks aligned to %v after server errors, want the throttled grid (%v): a strained EC2 gets fewer calls", got, c.cfg.ThrottledPollGrid)
	}
}

func TestFailingUntilTheDeadline(t *testing.T) {
	t.Parallel()
	c, _ := startEmulator(t, emulatortest.Options{Faults: faults.Config{Errors: []faults.ErrorRule{
		{Action: "DescribeAvailabilityZones", Code: faults.CodeUnavailable, Probability: 1},
	}}}, motoLacksFaults)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := c.AvailabilityZones(ctx)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want ErrUnavailable and the deadline", err)
	}
}

func TestWaitEndsWithTheDeadline(t *testing.T) {
	t.Parallel()
	c, env := startEmulator(t, emulatortest.Options{Faults: faults.Config{StuckAttach: faults.StuckAttach{Next: 1}}}, motoLacksFaults)
	vol := mustCreate(t, c, "pvc-1", &CreateVolumeOptions{SizeGiB: 1, Zone: env.Zone()})
	ctx, cancel := context.WithTimeout(context.Background(), cutShortDeadline)
	defer cancel()
	_, err := c.AttachVolume(ctx, vol.ID, env.LocalInstance().ID, AttachOptions{})
	if !errors.Is(err, ErrInProgress) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want ErrInProgress and the deadline", err)
	}
	// The next call picks the attachment up where this one stopped.
	env.Cloud().ReleaseStuckAttachments()
	if _, err := c.AttachVolume(testContext(t), vol.ID, env.LocalInstance().ID, AttachOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := env.Calls("AttachVolume"); n != 1 {
		t.Errorf("%d AttachVolume calls; the retry should have awaited the first", n)
	}
}

func TestCallWithoutDeadlineGetsDefault(t *testing.T) {
	t.Parallel()
	emulatorOnly(t, motoLacksFaults)
	env := emulatortest.Start(t, emulatortest.Options{Faults: faults.Config{Errors: []faults.ErrorRule{
		{Action: "DescribeAvailabilityZones", Code: faults.CodeInternalError, Probability: 1},
	}}})
	cfg := testConfig()
	cfg.DefaultTimeout = 200 * time.Millisecond
	_, err := newCloud(t, env, cfg).AvailabilityZones(context.Background())
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the default deadline to end the retries", err)
	}
}

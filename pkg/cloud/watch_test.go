package cloud

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/faults"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

func volumeRead(id string, state types.VolumeState) types.Volume {
	return types.Volume{VolumeId: aws.String(id), State: state}
}

// TestVolumeWatches: a watch gets the latest read of its volume answered
// after the watch began, and not one from a call sent before (it may show
// the volume as it was before the wait's request); the volumes other calls
// ask for too are the visible watched ones those calls do not name.
func TestVolumeWatches(t *testing.T) {
	var ws volumeWatches
	before := time.Now()
	a := ws.watch("vol-a")
	b := ws.watch("vol-b")
	defer ws.unwatch(b)

	ws.deliver([]types.Volume{volumeRead("vol-a", types.VolumeStateCreating)}, before, time.Now())
	select {
	case s := <-a.seen:
		t.Fatalf("a read from a call sent before the watch was handed over: %v", s.volume.State)
	default:
	}
	asked := time.Now()
	ws.deliver([]types.Volume{volumeRead("vol-a", types.VolumeStateCreating)}, asked, time.Now())
	ws.deliver([]types.Volume{volumeRead("vol-a", types.VolumeStateAvailable), volumeRead("vol-c", types.VolumeStateAvailable)}, asked, time.Now())
	if s := <-a.seen; s.volume.State != types.VolumeStateAvailable {
		t.Fatalf("watch got %s, want the latest read (available)", s.volume.State)
	}

	tests := []struct {
		name  string
		ids   []string
		limit int
		want  []string
	}{
		{name: "every visible watch", want: []string{"vol-a", "vol-b"}, limit: 10},
		{name: "not those the call names", ids: []string{"vol-a"}, want: []string{"vol-b"}, limit: 10},
		{name: "no room", ids: []string{"vol-x"}, limit: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ws.extras(tc.ids, tc.limit)
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("extras = %v, want %v", got, tc.want)
			}
		})
	}

	ws.hide([]string{"vol-b"})
	if got := ws.extras(nil, 10); !slices.Equal(got, []string{"vol-a"}) {
		t.Fatalf("extras after hiding vol-b = %v, want [vol-a]", got)
	}
	ws.deliver([]types.Volume{volumeRead("vol-b", types.VolumeStateAvailable)}, time.Now(), time.Now())
	if got := ws.extras([]string{"vol-a"}, 10); !slices.Equal(got, []string{"vol-b"}) {
		t.Fatalf("extras once a read found vol-b again = %v, want [vol-b]", got)
	}
	ws.unwatch(a)
	if got := ws.extras(nil, 10); !slices.Equal(got, []string{"vol-b"}) {
		t.Fatalf("extras after unwatching vol-a = %v, want [vol-b]", got)
	}
}

// TestWaitTakesOtherCallsReads: a wait whose look falls due after reads of
// its volume that other calls brought in takes them instead of calling:
// one in its first window counts as its first look, and one that finds the
// change done ends the wait.
func TestWaitTakesOtherCallsReads(t *testing.T) {
	c := &ec2Cloud{cfg: Config{PollStep: time.Millisecond, PollMaxInterval: time.Second}.withDefaults(), latencies: newLatencies(), throttles: &throttleClock{}}
	c.latencies.observe(transitionAttach, 990*time.Millisecond, 1010*time.Millisecond)
	sent := time.Now()
	go func() {
		time.Sleep(1050 * time.Millisecond) // in the first window (1 to 1.15 s)
		c.watches.deliver([]types.Volume{volumeRead("vol-a", types.VolumeStateCreating)}, time.Now(), time.Now())
		time.Sleep(30 * time.Millisecond) // before the wait's next look is due (a tenth of 1.05 s later)
		c.watches.deliver([]types.Volume{volumeRead("vol-a", types.VolumeStateAvailable)}, time.Now(), time.Now())
	}()
	w := c.watches.watch("vol-a")
	defer c.watches.unwatch(w)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	calls := 0
	err := c.await(ctx, transitionAttach, sent, w, func(_ context.Context, seen *seenVolume) (bool, string, error) {
		if seen == nil {
			calls++
			return false, "attaching", nil
		}
		return seen.volume.State == types.VolumeStateAvailable, string(seen.volume.State), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(sent); took < 1080*time.Millisecond || took > 2*time.Second {
		t.Fatalf("the wait took %v, want it to end with the read that found the change done (1.08 s)", took)
	}
	if calls != 0 {
		t.Fatalf("%d calls of its own", calls)
	}
}

// TestReadBeforeTheWindowTeachesNothing: another wait's call can bring in
// a read of the volume right after the request, long before the change is
// due. That read is no look, and its time is no bound of the change's: a
// first look in the window that finds the change done teaches the estimate
// as any first look that finds it done does, instead of the midpoint
// between the early read and the done one (half the change's time; at 500
// volumes a hundred at a time, the next wave then looked twice).
func TestReadBeforeTheWindowTeachesNothing(t *testing.T) {
	c := &ec2Cloud{cfg: Config{PollStep: time.Millisecond, PollMaxInterval: time.Second}.withDefaults(), latencies: newLatencies(), throttles: &throttleClock{}}
	for range latencySamples {
		c.latencies.observe(transitionAttach, 290*time.Millisecond, 310*time.Millisecond)
	}
	sent := time.Now()
	w := c.watches.watch("vol-a")
	defer c.watches.unwatch(w)
	go func() {
		time.Sleep(10 * time.Millisecond) // another publish's pre-read
		c.watches.deliver([]types.Volume{volumeRead("vol-a", types.VolumeStateCreating)}, time.Now(), time.Now())
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := c.await(ctx, transitionAttach, sent, w, func(_ context.Context, seen *seenVolume) (bool, string, error) {
		if seen != nil {
			return false, string(seen.volume.State), nil
		}
		return true, "attached", nil // its own look, in the window
	})
	if err != nil {
		t.Fatal(err)
	}
	s := c.latencies.samples[transitionAttach]
	if last := s[len(s)-1]; last < 250*time.Millisecond {
		t.Errorf("the wait taught %v; the change took about 300 ms, and only a look in the window bounds it", last)
	}
}

// TestWatchedVolumeGoneDoesNotFailOthers: a watched volume that EC2 no
// longer shows, asked for along with another call's volume, does not fail
// that call: the call is made again without it, and it is asked for no
// more until a read finds it.
func TestWatchedVolumeGoneDoesNotFailOthers(t *testing.T) {
	t.Parallel()
	c, env := startEmulator(t, emulatortest.Options{}, "counts its calls on the emulator's metrics")
	v := mustCreate(t, c, "asked-for", &CreateVolumeOptions{SizeGiB: 1, Zone: "us-east-1a"})
	gone := c.watches.watch("vol-0123456789abcdef0")
	defer c.watches.unwatch(gone)
	before := env.Calls("DescribeVolumes")
	if _, err := c.GetVolume(testContext(t), v.ID); err != nil {
		t.Fatalf("GetVolume beside a watched volume that does not exist = %v", err)
	}
	if n := env.Calls("DescribeVolumes") - before; n != 2 {
		t.Errorf("%d DescribeVolumes calls, want 2 (with the watched volume, then without)", n)
	}
	if got := c.watches.extras(nil, 10); len(got) != 0 {
		t.Errorf("extras after the failed call = %v, want none", got)
	}
}

// answerDone is SDK middleware that rewrites the answers to CreateVolume,
// AttachVolume and DetachVolume to show the change done, as an EC2-API
// cloud whose changes are instant answers.
func answerDone(stack *middleware.Stack) error {
	m := middleware.InitializeMiddlewareFunc("test/answer-done", func(ctx context.Context, in middleware.InitializeInput,
		next middleware.InitializeHandler,
	) (middleware.InitializeOutput, middleware.Metadata, error) {
		out, md, err := next.HandleInitialize(ctx, in)
		switch r := out.Result.(type) {
		case *ec2.CreateVolumeOutput:
			r.State = types.VolumeStateAvailable
		case *ec2.AttachVolumeOutput:
			r.State = types.VolumeAttachmentStateAttached
		case *ec2.DetachVolumeOutput:
			r.State = types.VolumeAttachmentStateDetached
		}
		return out, md, err
	})
	return stack.Initialize.Add(m, middleware.Before)
}

// TestAnswerShowingDoneIsNotWaitedFor: a create, attach or detach whose
// answer shows the change done returns without a look of its own, and the
// estimate learns that such changes take no time.
func TestAnswerShowingDoneIsNotWaitedFor(t *testing.T) {
	t.Parallel()
	emulatorOnly(t, "answers creates as available itself; the test rewrites the emulator's answers")
	const create = time.Second
	env := emulatortest.Start(t, emulatortest.Options{Latencies: model.Latencies{VolumeCreate: create, Attach: 5 * time.Second, Detach: 5 * time.Second}})
	awsCfg := env.AWSConfig("AKIDTEST", "test-secret")
	awsCfg.APIOptions = append(awsCfg.APIOptions, answerDone)
	cl, err := NewFromAWSConfig(awsCfg, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	c := cl.(*ec2Cloud)
	ctx := testContext(t)
	inst := env.LocalInstance().ID
	started := time.Now()
	v := mustCreate(t, c, "answered-done", &CreateVolumeOptions{SizeGiB: 1, Zone: "us-east-1a"})
	if took := time.Since(started); took >= create {
		t.Errorf("the create took %v: it waited for the emulator's change (%v)", took, create)
	}
	if v.State != volumeAvailable {
		t.Fatalf("volume %s, want available as the answer said", v.State)
	}
	time.Sleep(create)                      // the emulator's volume is available by now, so that it can be attached
	raw, err := c.describeVolume(ctx, v.ID) // the publish's read of the volume
	if err != nil {
		t.Fatal(err)
	}
	started = time.Now()
	before := env.Calls("DescribeVolumes")
	if _, err := c.AttachVolume(ctx, v.ID, inst, AttachOptions{Read: toVolume(raw)}); err != nil {
		t.Fatal(err)
	}
	if err := c.DetachVolume(ctx, v.ID, inst); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(started); took > 4*time.Second {
		t.Errorf("the attach and the detach took %v: they waited for the emulator's 5 s changes", took)
	}
	if n := env.Calls("DescribeVolumes") - before; n != 0 {
		t.Errorf("%d DescribeVolumes calls for an attach and a detach answered done, want 0", n)
	}
	for _, kind := range []transition{transitionCreate, transitionAttach, transitionDetach} {
		if d, ok := c.latencies.expected(kind); !ok || d != 0 {
			t.Errorf("%s estimate %v (%v), want 0", kind, d, ok)
		}
	}
}

// TestOwnLookTakesAnotherCallsDoneRead: a wait looking with a call of its
// own ends on a read that shows the change done which another call brings
// in before its own answers, and its own call, queued behind one under way,
// is never made; a read that does not show the change done is not taken,
// and the own call's answer decides.
func TestOwnLookTakesAnotherCallsDoneRead(t *testing.T) {
	t.Parallel()
	const slow = time.Second // every DescribeVolumes
	emulatorOnly(t, "slows the emulator's DescribeVolumes")
	env := emulatortest.Start(t, emulatortest.Options{Faults: faults.Config{Latency: map[string]faults.Duration{"DescribeVolumes": faults.Duration(slow)}}})
	cfg := testConfig()
	cfg.BatchMaxDelay = 2 * slow // a lookup waits for the call under way, as with the default against EC2's times
	c := newCloud(t, env, cfg)
	available := func(v types.Volume, err error) (bool, string, error) {
		if err != nil {
			return false, "", err
		}
		return v.State == types.VolumeStateAvailable, string(v.State), nil
	}
	deliverLater := func(id string, reads ...types.VolumeState) {
		go func() {
			for _, state := range reads {
				time.Sleep(100 * time.Millisecond)
				c.watches.deliver([]types.Volume{volumeRead(id, state)}, time.Now(), time.Now())
			}
		}()
	}

	t.Run("a done read ends the look, and the queued call is left", func(t *testing.T) {
		before := env.Calls("DescribeVolumes")
		go func() { _, _ = c.describeVolume(testContext(t), "vol-0000000000000000b") }() // under way while the look asks
		time.Sleep(50 * time.Millisecond)
		w := c.watches.watch("vol-0000000000000000a")
		defer c.watches.unwatch(w)
		deliverLater(w.id, types.VolumeStateCreating, types.VolumeStateAvailable)
		started := time.Now()
		done, _, err := c.lookAtVolume(testContext(t), w, available)
		if took := time.Since(started); err != nil || !done || took > slow/2 {
			t.Fatalf("look = %v, %v after %v; want done with the other call's read, at about 200 ms", done, err, took)
		}
		time.Sleep(slow + slow/2) // the call under way ends: a queued one would begin
		if n := env.Calls("DescribeVolumes") - before; n != 1 {
			t.Errorf("%d DescribeVolumes calls, want 1 (the other call's; the look's was left before it began)", n)
		}
	})

	t.Run("a read that is not done is not taken", func(t *testing.T) {
		w := c.watches.watch("vol-0000000000000000c")
		defer c.watches.unwatch(w)
		deliverLater(w.id, types.VolumeStateCreating)
		started := time.Now()
		_, _, err := c.lookAtVolume(testContext(t), w, available)
		if took := time.Since(started); !errors.Is(err, ErrNotFound) || took < slow {
			t.Fatalf("look = %v after %v; want the own call's answer (the volume does not exist) after %v", err, took, slow)
		}
	})
}

package batcher

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/diskplane/diskplane/pkg/testutil"
)

// recorder is an exec func that answers key → "v-"+key, remembers every
// batch it was called with, and treats keys listed in errFor as per-key
// errors and keys in poison as whole-call failures (like an unknown ID in
// EC2's DescribeVolumes).
type recorder struct {
	mu      sync.Mutex
	calls   [][]string
	missing map[string]bool
	errFor  map[string]error
	poison  map[string]bool
	// gate, when set, holds every call until it is closed.
	gate chan struct{}
	// entered receives each call's keys as it starts, when set.
	entered chan []string
}

var errPoison = errors.New("InvalidVolume.NotFound")

func (r *recorder) exec(ctx context.Context, keys []string) (map[string]Result[string], error) {
	r.mu.Lock()
	r.calls = append(r.calls, slices.Clone(keys))
	r.mu.Unlock()
	if r.entered != nil {
		r.entered <- slices.Clone(keys)
	}
	if r.gate != nil {
		select {
		case <-r.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	for _, k := range keys {
		if r.poison[k] {
			return nil, fmt.Errorf("describe %v: %w", keys, errPoison)
		}
	}
	out := make(map[string]Result[string])
	for _, k := range keys {
		switch {
		case r.missing[k]:
		case r.errFor[k] != nil:
			out[k] = Result[string]{Err: r.errFor[k]}
		default:
			out[k] = Result[string]{Value: "v-" + k}
		}
	}
	return out, nil
}

func (r *recorder) recorded() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

func newTestBatcher(t *testing.T, r *recorder, opts Options) (*Batcher[string, string], *manualClock) {
	t.Helper()
	clock := newManualClock()
	if opts.MaxEntries == 0 {
		opts.MaxEntries = 100
	}
	if opts.MaxDelay == 0 {
		opts.MaxDelay = time.Hour // only the manual clock ends a batch
	}
	b, err := newBatcher(r.exec, opts, clock.start)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b, clock
}

type outcome struct {
	value string
	err   error
}

func waitAll(waits []func() (string, error)) []outcome {
	out := make([]outcome, len(waits))
	for i, w := range waits {
		v, err := w()
		out[i] = outcome{v, err}
	}
	return out
}

func TestNewRejectsBadOptions(t *testing.T) {
	exec := (&recorder{}).exec
	tests := []struct {
		name string
		exec ExecFunc[string, string]
		opts Options
	}{
		{"no exec", nil, Options{MaxEntries: 1, MaxDelay: time.Second}},
		{"zero entries", exec, Options{MaxDelay: time.Second}},
		{"zero delay", exec, Options{MaxEntries: 1}},
		{"negative timeout", exec, Options{MaxEntries: 1, MaxDelay: time.Second, ExecTimeout: -1}},
		{"idle delay above the max", exec, Options{MaxEntries: 1, MaxDelay: time.Second, IdleDelay: 2 * time.Second}},
		{"negative idle delay", exec, Options{MaxEntries: 1, MaxDelay: time.Second, IdleDelay: -1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if b, err := New(tc.exec, tc.opts); err == nil {
				b.Close()
				t.Fatal("want an error")
			}
		})
	}
}

func TestBatchResults(t *testing.T) {
	errBroken := errors.New("volume is broken")
	tests := []struct {
		name      string
		asks      []string
		missing   map[string]bool
		errFor    map[string]error
		poison    map[string]bool
		split     bool
		wantCalls [][]string
		want      []outcome // per ask; err is matched with errors.Is
	}{
		{
			name:      "duplicates share one lookup",
			asks:      []string{"a", "b", "a", "a"},
			wantCalls: [][]string{{"a", "b"}},
			want:      []outcome{{"v-a", nil}, {"v-b", nil}, {"v-a", nil}, {"v-a", nil}},
		},
		{
			name:      "a key without a result is not found, the others are answered",
			asks:      []string{"a", "gone", "b"},
			missing:   map[string]bool{"gone": true},
			wantCalls: [][]string{{"a", "gone", "b"}},
			want:      []outcome{{"v-a", nil}, {"", ErrNotFound}, {"v-b", nil}},
		},
		{
			name:      "a per-key error reaches only that key's callers",
			asks:      []string{"a", "bad", "bad"},
			errFor:    map[string]error{"bad": errBroken},
			wantCalls: [][]string{{"a", "bad"}},
			want:      []outcome{{"v-a", nil}, {"", errBroken}, {"", errBroken}},
		},
		{
			name:      "a whole-call error without splitting reaches everybody",
			asks:      []string{"a", "bad", "b"},
			poison:    map[string]bool{"bad": true},
			wantCalls: [][]string{{"a", "bad", "b"}},
			want:      []outcome{{"", errPoison}, {"", errPoison}, {"", errPoison}},
		},
		{
			name:   "a poisonous key is isolated by halving",
			asks:   []string{"a", "b", "c", "bad", "e", "f", "g", "h"},
			poison: map[string]bool{"bad": true},
			split:  true,
			wantCalls: [][]string{
				{"a", "b", "c", "bad", "e", "f", "g", "h"},
				{"a", "b", "c", "bad"}, {"a", "b"}, {"c", "bad"}, {"c"}, {"bad"},
				{"e", "f", "g", "h"},
			},
			want: []outcome{{"v-a", nil}, {"v-b", nil}, {"v-c", nil}, {"", errPoison},
				{"v-e", nil}, {"v-f", nil}, {"v-g", nil}, {"v-h", nil}},
		},
		{
			name:   "two poisonous keys",
			asks:   []string{"x", "a", "b", "y"},
			poison: map[string]bool{"x": true, "y": true},
			split:  true,
			wantCalls: [][]string{
				{"x", "a", "b", "y"}, {"x", "a"}, {"x"}, {"a"}, {"b", "y"}, {"b"}, {"y"},
			},
			want: []outcome{{"", errPoison}, {"v-a", nil}, {"v-b", nil}, {"", errPoison}},
		},
		{
			name:      "a single poisonous key just fails",
			asks:      []string{"bad", "bad"},
			poison:    map[string]bool{"bad": true},
			split:     true,
			wantCalls: [][]string{{"bad"}},
			want:      []outcome{{"", errPoison}, {"", errPoison}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := Options{Name: "test"}
			if tc.split {
				opts.SplitOnError = func(err error) bool { return errors.Is(err, errPoison) }
			}
			rec := &recorder{missing: tc.missing, errFor: tc.errFor, poison: tc.poison}
			b, clock := newTestBatcher(t, rec, opts)
			var waits []func() (string, error)
			for _, k := range tc.asks {
				waits = append(waits, ask(b, context.Background(), k))
			}
			clock.next(t).fire()
			got := waitAll(waits)
			for i, w := range tc.want {
				g := got[i]
				if g.value != w.value || (w.err == nil) != (g.err == nil) || (w.err != nil && !errors.Is(g.err, w.err)) {
					t.Errorf("ask %d (%s) = %q, %v; want %q, %v", i, tc.asks[i], g.value, g.err, w.value, w.err)
				}
			}
			if calls := rec.recorded(); !slices.EqualFunc(calls, tc.wantCalls, slices.Equal) {
				t.Errorf("exec calls = %v, want %v", calls, tc.wantCalls)
			}
		})
	}
}

func TestMaxEntriesEndsABatchEarly(t *testing.T) {
	rec := &recorder{}
	b, clock := newTestBatcher(t, rec, Options{MaxEntries: 2})
	// The second distinct key fills the batch: it runs without the timer.
	// A duplicate does not count towards the limit.
	w1 := ask(b, context.Background(), "a")
	w2 := ask(b, context.Background(), "a")
	w3 := ask(b, context.Background(), "b")
	first := clock.next(t)
	got := waitAll([]func() (string, error){w1, w2, w3})
	want := []outcome{{"v-a", nil}, {"v-a", nil}, {"v-b", nil}}
	if !slices.Equal(got, want) {
		t.Fatalf("results = %v, want %v", got, want)
	}
	<-first.stopped
	w4 := ask(b, context.Background(), "c")
	clock.next(t).fire()
	if v, err := w4(); v != "v-c" || err != nil {
		t.Fatalf("c = %q, %v", v, err)
	}
	if calls, want := rec.recorded(), [][]string{{"a", "b"}, {"c"}}; !slices.EqualFunc(calls, want, slices.Equal) {
		t.Fatalf("exec calls = %v, want %v", calls, want)
	}
}

func TestCallersThatLeaveBeforeTheBatchAreNotLookedUp(t *testing.T) {
	rec := &recorder{}
	b, clock := newTestBatcher(t, rec, Options{})
	gone, cancelGone := context.WithCancel(context.Background())
	half, cancelHalf := context.WithCancel(context.Background())
	wGone := ask(b, gone, "gone")
	wHalfLeft := ask(b, half, "shared")
	wHalfStays := ask(b, context.Background(), "shared")
	wOther := ask(b, context.Background(), "other")
	cancelGone()
	cancelHalf()
	if _, err := wGone(); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller: err = %v, want context.Canceled", err)
	}
	if _, err := wHalfLeft(); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller of a shared key: err = %v, want context.Canceled", err)
	}
	clock.next(t).fire()
	if v, err := wHalfStays(); v != "v-shared" || err != nil {
		t.Fatalf("remaining caller of a shared key = %q, %v", v, err)
	}
	if v, err := wOther(); v != "v-other" || err != nil {
		t.Fatalf("other = %q, %v", v, err)
	}
	if calls, want := rec.recorded(), [][]string{{"shared", "other"}}; !slices.EqualFunc(calls, want, slices.Equal) {
		t.Fatalf("exec calls = %v, want %v", calls, want)
	}
}

func TestCallerLeavesWhileTheBatchRuns(t *testing.T) {
	rec := &recorder{gate: make(chan struct{}), entered: make(chan []string, 1)}
	b, clock := newTestBatcher(t, rec, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	leaver := ask(b, ctx, "a")
	stayer := ask(b, context.Background(), "a")
	clock.next(t).fire()
	<-rec.entered
	cancel()
	if _, err := leaver(); !errors.Is(err, context.Canceled) {
		t.Fatalf("leaver: err = %v, want context.Canceled", err)
	}
	close(rec.gate)
	if v, err := stayer(); v != "v-a" || err != nil {
		t.Fatalf("stayer = %q, %v; the batch must still run for it", v, err)
	}
}

func TestARequestDuringARunningBatchJoinsTheNextOne(t *testing.T) {
	rec := &recorder{gate: make(chan struct{}), entered: make(chan []string, 2)}
	b, clock := newTestBatcher(t, rec, Options{})
	early := ask(b, context.Background(), "a")
	clock.next(t).fire()
	<-rec.entered
	late := ask(b, context.Background(), "a")
	clock.next(t).fire()
	<-rec.entered
	close(rec.gate)
	waitAll([]func() (string, error){early, late})
	if calls, want := rec.recorded(), [][]string{{"a"}, {"a"}}; !slices.EqualFunc(calls, want, slices.Equal) {
		t.Fatalf("exec calls = %v, want %v (the late caller must get a fresh lookup)", calls, want)
	}
}

func TestExecTimeoutBoundsABatch(t *testing.T) {
	rec := &recorder{gate: make(chan struct{})} // never opened: only the timeout ends the call
	b, clock := newTestBatcher(t, rec, Options{ExecTimeout: time.Millisecond})
	w := ask(b, context.Background(), "a")
	clock.next(t).fire()
	if _, err := w(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}
}

func TestClose(t *testing.T) {
	rec := &recorder{gate: make(chan struct{}), entered: make(chan []string, 1)}
	b, clock := newTestBatcher(t, rec, Options{})
	running := ask(b, context.Background(), "running")
	clock.next(t).fire()
	<-rec.entered
	queued := ask(b, context.Background(), "queued")
	clock.next(t) // the queued batch's timer never fires
	b.Close()
	if _, err := running(); !errors.Is(err, context.Canceled) {
		t.Errorf("running batch: err = %v, want its context cancelled", err)
	}
	if _, err := queued(); !errors.Is(err, ErrClosed) {
		t.Errorf("queued caller: err = %v, want ErrClosed", err)
	}
	if _, err := b.Get(context.Background(), "after"); !errors.Is(err, ErrClosed) {
		t.Errorf("Get after Close: err = %v, want ErrClosed", err)
	}
	b.Close() // a second Close is harmless
	testutil.AssertNoGoroutines(t, "batcher.(*Batcher[")
}

// TestIdleDelay: with no call running, a batch waits only IdleDelay; while
// one runs, the next gathers keys until it ends, then starts at once (after
// IdleDelay), so a busy batcher sends one call per round trip.
func TestIdleDelay(t *testing.T) {
	rec := &recorder{gate: make(chan struct{}), entered: make(chan []string, 2)}
	b, clock := newTestBatcher(t, rec, Options{IdleDelay: time.Millisecond})
	first := ask(b, context.Background(), "a")
	timer := clock.next(t)
	if timer.d != time.Millisecond {
		t.Fatalf("an idle batcher's batch waits %v, want IdleDelay", timer.d)
	}
	timer.fire()
	<-rec.entered

	// A call runs: the next batch gathers for up to MaxDelay...
	second := ask(b, context.Background(), "b")
	third := ask(b, context.Background(), "c")
	timer = clock.next(t)
	if timer.d != time.Hour {
		t.Fatalf("a batch behind a running call waits %v, want MaxDelay", timer.d)
	}
	// ...and no longer than the call.
	close(rec.gate)
	if _, err := first(); err != nil {
		t.Fatal(err)
	}
	<-timer.stopped
	timer = clock.next(t)
	if timer.d != time.Millisecond {
		t.Fatalf("after the running call the batch waits %v, want IdleDelay", timer.d)
	}
	timer.fire()
	waitAll([]func() (string, error){second, third})
	if calls, want := rec.recorded(), [][]string{{"a"}, {"b", "c"}}; !slices.EqualFunc(calls, want, slices.Equal) {
		t.Fatalf("exec calls = %v, want %v", calls, want)
	}
}

// ask submits one key, as Get does, and returns the function that waits for
// its result.
func ask(b *Batcher[string, string], ctx context.Context, key string) func() (string, error) {
	return b.submit(ctx, []string{key})[0]
}

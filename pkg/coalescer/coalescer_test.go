package coalescer

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

// change is a volume modification as the controller would coalesce it: a
// zero field means "leave as it is".
type change struct {
	SizeGiB int
	IOPS    int
	Type    string
}

var errConflict = errors.New("conflicting change")

// mergeChanges merges two changes whose set fields agree.
func mergeChanges(a, b change) (change, error) {
	pick := func(name string, x, y int) (int, error) {
		if x != 0 && y != 0 && x != y {
			return 0, fmt.Errorf("%s %d vs %d: %w", name, x, y, errConflict)
		}
		return max(x, y), nil
	}
	var err error
	out := a
	if out.SizeGiB, err = pick("size", a.SizeGiB, b.SizeGiB); err != nil {
		return change{}, err
	}
	if out.IOPS, err = pick("iops", a.IOPS, b.IOPS); err != nil {
		return change{}, err
	}
	if a.Type != "" && b.Type != "" && a.Type != b.Type {
		return change{}, fmt.Errorf("type %s vs %s: %w", a.Type, b.Type, errConflict)
	}
	if out.Type == "" {
		out.Type = b.Type
	}
	return out, nil
}

type execCall struct {
	key string
	in  change
}

// modifier is an exec func that records its calls and answers with a
// description of what it applied.
type modifier struct {
	mu    sync.Mutex
	calls []execCall
	err   error
	// active counts running executions per key; overlaps counts executions
	// that started while another for the same key was running.
	active   map[string]int
	overlaps int
	// gate, when set, holds every call until it is closed.
	gate chan struct{}
	// entered receives each call's key as it starts, when set.
	entered chan string
}

func (m *modifier) exec(ctx context.Context, key string, in change) (string, error) {
	m.mu.Lock()
	m.calls = append(m.calls, execCall{key, in})
	if m.active == nil {
		m.active = make(map[string]int)
	}
	if m.active[key] > 0 {
		m.overlaps++
	}
	m.active[key]++
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.active[key]--
		m.mu.Unlock()
	}()
	if m.entered != nil {
		m.entered <- key
	}
	if m.gate != nil {
		select {
		case <-m.gate:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	if m.err != nil {
		return "", m.err
	}
	return fmt.Sprintf("%s:%+v", key, in), nil
}

func (m *modifier) overlapping() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.overlaps
}

func (m *modifier) recorded() []execCall {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.calls)
}

func newTestCoalescer(t *testing.T, m *modifier, opts Options) (*Coalescer[string, change, string], *manualClock) {
	t.Helper()
	clock := newManualClock()
	if opts.Window == 0 {
		opts.Window = time.Hour // only the manual clock ends a window
	}
	c, err := newCoalescer(mergeChanges, m.exec, opts, clock.afterFunc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, clock
}

func TestNewRejectsBadOptions(t *testing.T) {
	exec := (&modifier{}).exec
	tests := []struct {
		name  string
		merge MergeFunc[change]
		exec  ExecFunc[string, change, string]
		opts  Options
	}{
		{"no merge", nil, exec, Options{Window: time.Second}},
		{"no exec", mergeChanges, nil, Options{Window: time.Second}},
		{"zero window", mergeChanges, exec, Options{}},
		{"negative timeout", mergeChanges, exec, Options{Window: time.Second, ExecTimeout: -1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if c, err := New(tc.merge, tc.exec, tc.opts); err == nil {
				c.Close()
				t.Fatal("want an error")
			}
		})
	}
}

type ask struct {
	key string
	in  change
}

type answer struct {
	out string
	err error // matched with errors.Is
}

func TestOneWindow(t *testing.T) {
	errEC2 := errors.New("IncorrectModificationState")
	tests := []struct {
		name      string
		asks      []ask // all within one window per key
		execErr   error
		wantCalls []execCall
		want      []answer
	}{
		{
			name:      "expand and modify become one execution",
			asks:      []ask{{"vol-1", change{SizeGiB: 20}}, {"vol-1", change{IOPS: 4000, Type: "gp3"}}},
			wantCalls: []execCall{{"vol-1", change{20, 4000, "gp3"}}},
			want: []answer{
				{out: "vol-1:{SizeGiB:20 IOPS:4000 Type:gp3}"},
				{out: "vol-1:{SizeGiB:20 IOPS:4000 Type:gp3}"},
			},
		},
		{
			name: "a conflicting request fails alone",
			asks: []ask{
				{"vol-1", change{SizeGiB: 20}},
				{"vol-1", change{SizeGiB: 30}},
				{"vol-1", change{IOPS: 4000}},
			},
			wantCalls: []execCall{{"vol-1", change{SizeGiB: 20, IOPS: 4000}}},
			want: []answer{
				{out: "vol-1:{SizeGiB:20 IOPS:4000 Type:}"},
				{err: errConflict},
				{out: "vol-1:{SizeGiB:20 IOPS:4000 Type:}"},
			},
		},
		{
			name:      "identical requests merge",
			asks:      []ask{{"vol-1", change{SizeGiB: 20}}, {"vol-1", change{SizeGiB: 20}}},
			wantCalls: []execCall{{"vol-1", change{SizeGiB: 20}}},
			want: []answer{
				{out: "vol-1:{SizeGiB:20 IOPS:0 Type:}"},
				{out: "vol-1:{SizeGiB:20 IOPS:0 Type:}"},
			},
		},
		{
			name:      "an execution error reaches every merged caller",
			asks:      []ask{{"vol-1", change{SizeGiB: 20}}, {"vol-1", change{IOPS: 4000}}},
			execErr:   errEC2,
			wantCalls: []execCall{{"vol-1", change{SizeGiB: 20, IOPS: 4000}}},
			want:      []answer{{err: errEC2}, {err: errEC2}},
		},
		{
			name: "different keys do not merge",
			asks: []ask{{"vol-1", change{SizeGiB: 20}}, {"vol-2", change{SizeGiB: 30}}},
			wantCalls: []execCall{
				{"vol-1", change{SizeGiB: 20}},
				{"vol-2", change{SizeGiB: 30}},
			},
			want: []answer{
				{out: "vol-1:{SizeGiB:20 IOPS:0 Type:}"},
				{out: "vol-2:{SizeGiB:30 IOPS:0 Type:}"},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := &modifier{err: tc.execErr}
			c, clock := newTestCoalescer(t, m, Options{Name: "test"})
			var waits []func() (string, error)
			timers := map[string]*manualTimer{}
			var order []string
			for _, a := range tc.asks {
				waits = append(waits, c.submit(context.Background(), a.key, a.in))
				if _, ok := timers[a.key]; !ok {
					timers[a.key] = clock.next()
					order = append(order, a.key)
				}
			}
			for _, k := range order {
				timers[k].fire()
				// Wait for this key's answer so the executions are recorded
				// in key order.
				for i, a := range tc.asks {
					if a.key == k {
						checkAnswer(t, i, waits[i], tc.want[i])
					}
				}
			}
			if calls := m.recorded(); !slices.Equal(calls, tc.wantCalls) {
				t.Errorf("executions = %+v, want %+v", calls, tc.wantCalls)
			}
		})
	}
}

func checkAnswer(t *testing.T, i int, wait func() (string, error), want answer) {
	t.Helper()
	out, err := wait()
	if out != want.out || (want.err == nil) != (err == nil) || (want.err != nil && !errors.Is(err, want.err)) {
		t.Errorf("request %d = %q, %v; want %q, %v", i, out, err, want.out, want.err)
	}
}

func TestExecutionsForOneKeyNeverOverlap(t *testing.T) {
	m := &modifier{gate: make(chan struct{}), entered: make(chan string, 2)}
	c, clock := newTestCoalescer(t, m, Options{})
	first := c.submit(context.Background(), "vol-1", change{SizeGiB: 20})
	clock.next().fire()
	<-m.entered
	// While the first execution runs, a request opens the next window, and
	// a conflicting value is fine there: it is a new change.
	second := c.submit(context.Background(), "vol-1", change{SizeGiB: 30})
	clock.next().fire()
	// The second window has ended but must wait for the first execution.
	select {
	case k := <-m.entered:
		t.Fatalf("second execution for %s started while the first was running", k)
	default:
	}
	close(m.gate)
	checkAnswer(t, 0, first, answer{out: "vol-1:{SizeGiB:20 IOPS:0 Type:}"})
	checkAnswer(t, 1, second, answer{out: "vol-1:{SizeGiB:30 IOPS:0 Type:}"})
	want := []execCall{{"vol-1", change{SizeGiB: 20}}, {"vol-1", change{SizeGiB: 30}}}
	if calls := m.recorded(); !slices.Equal(calls, want) {
		t.Fatalf("executions = %+v, want %+v", calls, want)
	}
	if n := m.overlapping(); n > 0 {
		t.Fatalf("%d executions overlapped another for the same key", n)
	}
}

func TestOtherKeysRunWhileOneIsBusy(t *testing.T) {
	m := &modifier{gate: make(chan struct{}), entered: make(chan string, 2)}
	c, clock := newTestCoalescer(t, m, Options{})
	busy := c.submit(context.Background(), "vol-1", change{SizeGiB: 20})
	clock.next().fire()
	if k := <-m.entered; k != "vol-1" {
		t.Fatalf("started %s, want vol-1", k)
	}
	other := c.submit(context.Background(), "vol-2", change{SizeGiB: 30})
	clock.next().fire()
	if k := <-m.entered; k != "vol-2" {
		t.Fatalf("started %s, want vol-2 while vol-1 is still running", k)
	}
	close(m.gate)
	checkAnswer(t, 0, busy, answer{out: "vol-1:{SizeGiB:20 IOPS:0 Type:}"})
	checkAnswer(t, 1, other, answer{out: "vol-2:{SizeGiB:30 IOPS:0 Type:}"})
}

func TestCallerLeavesButItsChangeIsApplied(t *testing.T) {
	m := &modifier{}
	c, clock := newTestCoalescer(t, m, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	leaver := c.submit(ctx, "vol-1", change{SizeGiB: 20})
	stayer := c.submit(context.Background(), "vol-1", change{IOPS: 4000})
	timer := clock.next()
	cancel()
	if _, err := leaver(); !errors.Is(err, context.Canceled) {
		t.Fatalf("leaver: err = %v, want context.Canceled", err)
	}
	timer.fire()
	checkAnswer(t, 1, stayer, answer{out: "vol-1:{SizeGiB:20 IOPS:4000 Type:}"})
}

func TestExecTimeoutBoundsAnExecution(t *testing.T) {
	m := &modifier{gate: make(chan struct{})} // never opened: only the timeout ends the call
	c, clock := newTestCoalescer(t, m, Options{ExecTimeout: time.Millisecond})
	w := c.submit(context.Background(), "vol-1", change{SizeGiB: 20})
	clock.next().fire()
	if _, err := w(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}
}

func TestClose(t *testing.T) {
	m := &modifier{gate: make(chan struct{}), entered: make(chan string, 1)}
	c, clock := newTestCoalescer(t, m, Options{})
	running := c.submit(context.Background(), "vol-1", change{SizeGiB: 20})
	clock.next().fire()
	<-m.entered
	queuedBehind := c.submit(context.Background(), "vol-1", change{SizeGiB: 30})
	behindTimer := clock.next()
	open := c.submit(context.Background(), "vol-2", change{SizeGiB: 30})
	openTimer := clock.next()
	c.Close()
	if _, err := running(); !errors.Is(err, context.Canceled) {
		t.Errorf("running execution: err = %v, want its context cancelled", err)
	}
	for i, w := range []func() (string, error){queuedBehind, open} {
		if _, err := w(); !errors.Is(err, ErrClosed) {
			t.Errorf("pending request %d: err = %v, want ErrClosed", i, err)
		}
	}
	<-behindTimer.stopped
	<-openTimer.stopped
	openTimer.fire() // a timer that fires after Close must not block or run anything
	if _, err := c.Do(context.Background(), "vol-3", change{}); !errors.Is(err, ErrClosed) {
		t.Errorf("Do after Close: err = %v, want ErrClosed", err)
	}
	c.Close()
	if n := len(m.recorded()); n != 1 {
		t.Errorf("%d executions, want only the one that was running", n)
	}
	testutil.AssertNoGoroutines(t, "coalescer.(*Coalescer[")
}

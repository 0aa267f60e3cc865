package cloud

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestLatenciesLearn(t *testing.T) {
	l := newLatencies()
	if _, ok := l.expected(transitionAttach); ok {
		t.Fatal("an estimate before any wait")
	}
	// Looks at 1.9 s (not yet) and 2.1 s (done): the change was in between.
	l.observe(transitionAttach, 1900*time.Millisecond, 2100*time.Millisecond)
	if d, _ := l.expected(transitionAttach); d != 2*time.Second {
		t.Fatalf("estimate %v, want the midpoint 2s", d)
	}
	// A first look that found it done says only "no later than": probe below.
	l.observe(transitionAttach, 0, 2500*time.Millisecond)
	l.observe(transitionAttach, 0, 2500*time.Millisecond)
	if d, _ := l.expected(transitionAttach); d != 2*time.Second {
		t.Fatalf("estimate %v, want 2s (the median of 2s, 2s, 2s)", d)
	}
	if _, ok := l.expected(transitionCreate); ok {
		t.Fatal("kinds share estimates")
	}
	for range 2 * latencySamples {
		l.observe(transitionCreate, 900*time.Millisecond, 1100*time.Millisecond)
	}
	if n := len(l.samples[transitionCreate]); n != latencySamples {
		t.Fatalf("%d samples kept, want %d", n, latencySamples)
	}
}

func TestAlignUp(t *testing.T) {
	base := time.Unix(1000, 0)
	tests := []struct {
		in   time.Time
		grid time.Duration
		want time.Time
	}{
		{base, 100 * time.Millisecond, base},
		{base.Add(time.Millisecond), 100 * time.Millisecond, base.Add(100 * time.Millisecond)},
		{base.Add(199 * time.Millisecond), 100 * time.Millisecond, base.Add(200 * time.Millisecond)},
		{base.Add(7 * time.Millisecond), 0, base.Add(7 * time.Millisecond)},
	}
	for _, tc := range tests {
		if got := alignUp(tc.in, tc.grid); !got.Equal(tc.want) {
			t.Errorf("alignUp(%v, %v) = %v, want %v", tc.in, tc.grid, got, tc.want)
		}
	}
}

// TestWaitTransitionLooksWhenDue: a wait for a change of a known latency
// looks first when it is due, not at once, and learns from what it sees.
func TestWaitTransitionLooksWhenDue(t *testing.T) {
	c := &ec2Cloud{cfg: Config{PollInterval: 20 * time.Millisecond, PollMaxInterval: 40 * time.Millisecond, PollGrid: time.Millisecond}, latencies: newLatencies()}
	c.latencies.observe(transitionDetach, 290*time.Millisecond, 310*time.Millisecond)
	sent := time.Now()
	var looks []time.Duration
	err := c.waitTransition(context.Background(), transitionDetach, sent, func(context.Context) (bool, string, error) {
		looks = append(looks, time.Since(sent))
		return len(looks) == 2, "detaching", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if looks[0] < 300*time.Millisecond {
		t.Fatalf("first look after %v, want none before the expected 300ms", looks[0])
	}
	if len(c.latencies.samples[transitionDetach]) != 2 {
		t.Fatal("the wait taught nothing")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err = c.waitTransition(ctx, transitionAttach, time.Now(), func(context.Context) (bool, string, error) { return false, "attaching", nil })
	if !errors.Is(err, ErrInProgress) {
		t.Fatalf("a wait cut short = %v, want ErrInProgress", err)
	}
}

package cloud

import (
	"context"
	"testing"
	"time"
)

// TestLookBookJoinLater: a wait woken on its tick moves to the next one only
// when it is alone on its own and others are booked on the next; waits that
// share a tick all count each other, whichever wakes first.
func TestLookBookJoinLater(t *testing.T) {
	tick := time.Unix(1000, 0)
	later := tick.Add(100 * time.Millisecond)
	tests := []struct {
		name         string
		onTick, next int // waits booked on the tick and the next one
		want         []bool
	}{
		{name: "alone, others next", onTick: 1, next: 9, want: []bool{true}},
		{name: "alone, none next", onTick: 1, want: []bool{false}},
		{name: "two on the tick", onTick: 2, next: 9, want: []bool{false, false}},
		{name: "ten on the tick, each woken in turn", onTick: 10, next: 1, want: []bool{false, false, false, false, false, false, false, false, false, false}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b lookBook
			for range tc.onTick {
				b.book(tick)
			}
			for range tc.next {
				b.book(later)
			}
			for i, want := range tc.want {
				if got := b.joinLater(tick, later); got != want {
					t.Fatalf("wait %d woken on the tick: joinLater = %v, want %v", i+1, got, want)
				}
			}
			moved := 0
			if tc.want[0] {
				moved = 1
			}
			if got := b.booked[later.UnixNano()]; got != tc.next+moved {
				t.Fatalf("%d booked on the next tick, want %d", got, tc.next+moved)
			}
		})
	}
}

// TestLookBookCancel: a booking taken back no longer counts, and a tick with
// none left is forgotten.
func TestLookBookCancel(t *testing.T) {
	var b lookBook
	tick := time.Unix(1000, 0)
	b.book(tick)
	b.book(tick)
	b.cancel(tick)
	if got := b.booked[tick.UnixNano()]; got != 1 {
		t.Fatalf("%d booked after one of two was taken back, want 1", got)
	}
	b.cancel(tick)
	if _, ok := b.booked[tick.UnixNano()]; ok {
		t.Fatal("a tick with no booking left is still kept")
	}
}

// TestLookBookForgetsOldTicks: bookings of ticks long past are dropped once
// the book holds many, so that it does not grow with the process's life.
func TestLookBookForgetsOldTicks(t *testing.T) {
	var b lookBook
	start := time.Unix(1000, 0)
	for i := range 100 {
		b.book(start.Add(time.Duration(i) * time.Second))
	}
	if n := len(b.booked); n > 64+int(lookBookKeep/time.Second) {
		t.Fatalf("%d ticks kept, want those of the last %v once there are 64", n, lookBookKeep)
	}
	if _, ok := b.booked[start.Add(99*time.Second).UnixNano()]; !ok {
		t.Fatal("the newest booking was dropped")
	}
}

// TestWaitTransitionJoinsTheNextTick: a wait due alone on a tick looks on
// the next one of the fine grid when other waits are booked there, and on
// its own tick when none are, or when the grid is the coarse one of a
// throttled EC2.
func TestWaitTransitionJoinsTheNextTick(t *testing.T) {
	const grid = 100 * time.Millisecond
	tests := []struct {
		name      string
		booked    bool // another wait booked on the tick after this one's
		throttled bool
		wantLater bool
	}{
		{name: "others on the next tick", booked: true, wantLater: true},
		{name: "none on the next tick"},
		{name: "throttled", booked: true, throttled: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &ec2Cloud{cfg: Config{PollInterval: 10 * time.Millisecond, PollMaxInterval: 20 * time.Millisecond,
				PollGrid: grid, ThrottledPollGrid: grid}, latencies: newLatencies(), throttles: &throttleClock{}}
			if tc.throttled {
				// The coarse grid has the fine one's step here, so that
				// only which grid it is differs.
				c.cfg.PollGrid = grid / 2
				c.throttles.throttled("CreateVolume", grid)
			}
			c.latencies.observe(transitionAttach, 140*time.Millisecond, 160*time.Millisecond, time.Millisecond)
			sent := time.Now()
			due := alignUp(sent.Add(150*time.Millisecond), grid)
			if tc.booked {
				c.looks.book(due.Add(grid))
			}
			var look time.Time
			err := c.waitTransition(context.Background(), transitionAttach, sent, func(context.Context) (bool, string, error) {
				look = time.Now()
				return true, "attached", nil
			})
			if err != nil {
				t.Fatal(err)
			}
			want := due
			if tc.wantLater {
				want = due.Add(grid)
			}
			if look.Before(want) || !look.Before(want.Add(grid)) {
				t.Fatalf("looked %v after the due tick, want at %v after it", look.Sub(due), want.Sub(due))
			}
		})
	}
}

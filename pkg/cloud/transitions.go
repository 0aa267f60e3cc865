package cloud

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/aws/smithy-go/middleware"

	"github.com/diskplane/diskplane/pkg/cloud/apimetrics"
)

// transition names a state change EC2 makes in its own time after a
// request: how long one takes is learned per kind.
type transition string

// The state changes the cloud layer waits for.
const (
	transitionCreate transition = "create" // creating → available
	transitionAttach transition = "attach" // attaching → attached
	transitionDetach transition = "detach" // detaching → detached
	transitionModify transition = "modify" // modifying → optimizing
)

// latencySamples is how many recent waits of a kind the estimate is made
// of: enough to ride out an outlier, few enough to follow EC2 when it slows
// down or speeds up.
const latencySamples = 25

// latencies learns how long EC2 takes to make each kind of state change,
// from the waits themselves, so that a wait looks first when the change is
// due instead of polling from the start: a wait costs one Describe call
// (shared with the others due at the same moment) and ends within a poll
// step of the change. It is safe for concurrent use.
type latencies struct {
	mu      sync.Mutex
	samples map[transition][]latencySample // most recent last
	// notDone holds, per kind, the last look of each recent wait that found
	// the change not done yet (most recent last): each is a time the change
	// took longer than, which bounds how far below a first look's time the
	// change can have been.
	notDone map[transition][]time.Duration
}

// latencySample is one wait's estimate of how long its change took.
type latencySample struct {
	d time.Duration
	// stepped is how much earlier than its wait saw the change the sample
	// was put (zero: not), a guess that the change is done a tick earlier,
	// which a look that finds it not done then takes back (see observe).
	stepped time.Duration
}

func newLatencies() *latencies {
	return &latencies{samples: map[transition][]latencySample{}, notDone: map[transition][]time.Duration{}}
}

// expected returns the median of the recent samples of kind, or false when
// there are none yet.
func (l *latencies) expected(kind transition) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.samples[kind]
	if len(s) == 0 {
		return 0, false
	}
	sorted := make([]time.Duration, len(s))
	for i, v := range s {
		sorted[i] = v.d
	}
	slices.Sort(sorted)
	return sorted[len(sorted)/2], true
}

// observe records a wait that saw the change done at doneAt after the
// request, having seen it not done at notDoneAt (zero when the first look
// found it done). The change happened in between; the midpoint is the
// sample.
//
// A first look that found the change done says only that it took no longer.
// Its sample is half a probe step earlier than that look, so that the
// estimate keeps probing downwards and follows EC2 when it speeds up. When
// no recent not-done look (another wait's) is below it, or the highest
// below is two steps or more below, the sample is a whole step earlier
// still: the next waits look a tick earlier, and waves step down a tick at
// a time until a look comes too early. Without that, waits that all start
// at one point of the grid (a burst of requests sent together) and whose
// estimate came out a tick or more late, from the coarse bracket of the
// very first waits' looks, a midpoint that fell just past a tick, or a
// first look that already found the change done, look that late for good:
// half a step below a look aligns up to that same look. Moving by a whole
// step keeps the sample half a step from a tick, whatever the calls' round
// trips add to the looks' times.
//
// A look that found the change not done takes back the steps of the samples
// below it: they pointed at a tick now known to be too early, and left in
// place they kept the median there, so that the next wave of waits looked
// too early again.
func (l *latencies) observe(kind transition, notDoneAt, doneAt, probe time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var sample latencySample
	if notDoneAt > 0 {
		sample.d = (notDoneAt + doneAt) / 2
		l.notDone[kind] = keepRecent(l.notDone[kind], notDoneAt)
		for i, s := range l.samples[kind] {
			if s.stepped > 0 && s.d < notDoneAt {
				l.samples[kind][i] = latencySample{d: s.d + s.stepped}
			}
		}
	} else {
		sample.d = doneAt - probe/2
		if below, ok := highestBelow(l.notDone[kind], doneAt); !ok || doneAt-below >= 2*probe {
			sample = latencySample{d: sample.d - probe, stepped: probe}
		}
	}
	l.samples[kind] = keepRecent(l.samples[kind], sample)
}

// keepRecent appends v to s and drops the oldest beyond latencySamples.
func keepRecent[T any](s []T, v T) []T {
	s = append(s, v)
	if len(s) > latencySamples {
		s = s[len(s)-latencySamples:]
	}
	return s
}

// highestBelow returns the largest of looks that is below at, or false when
// none is.
func highestBelow(looks []time.Duration, at time.Duration) (time.Duration, bool) {
	var best time.Duration
	found := false
	for _, d := range looks {
		if d < at && (!found || d > best) {
			best, found = d, true
		}
	}
	return best, found
}

// waitTransition waits until check reports done, for a state change of kind
// that a request this process sent at sent set off. That is when the attempt
// EC2 took left (see sentAt), not when the cloud layer called the SDK: timed
// from the call, a request the SDK held back for seconds would have its
// first look come before the shared ones (a call of its own that finds the
// change not done) and teach the estimate the delay. Its first look is when
// changes of that kind recently took; when that look finds the change not
// done, the next is a grid step later, the ones after PollInterval apart and
// then half as long again each time, up to PollMaxInterval. When no change
// of the kind was seen yet, the looks are ColdFirstLook after the send and
// then each half as late again after it (a step up to PollMaxInterval).
// Every look is aligned to the poll grid (PollGrid, coarser while EC2
// throttles: see pollGrid), so concurrent waits look together and share a
// batched call. What it sees teaches the estimate. A zero sent means the
// change was found under way, begun by a request this process did not time:
// the wait looks at once, as poll does, and learns nothing, since it cannot
// tell how long the change took.
func (c *ec2Cloud) waitTransition(ctx context.Context, kind transition, sent time.Time, check pollCheck) error {
	learn := !sent.IsZero()
	next := time.Now()
	// grid is the one the next look is aligned to; a look found done at the
	// first try teaches the estimate half of it less (see observe).
	grid := c.pollGrid()
	// due: the first look is when the change is expected; when it is not
	// done then, it is imminent, and the second look follows a grid step
	// later instead of a poll step.
	due := false
	// cold: when a wait with no estimate to go by meant to look, after the
	// send.
	cold := c.cfg.ColdFirstLook
	if learn {
		first := cold
		if d, ok := c.latencies.expected(kind); ok {
			first, due = d, true
		}
		next = alignUp(sent.Add(first), grid)
	}
	pause := c.cfg.PollInterval
	var notDoneAt time.Duration
	status := "not looked at yet"
	for {
		var err error
		if next, err = c.awaitLook(ctx, next, grid); err != nil {
			return stillInProgress(ctx, status)
		}
		done, s, err := check(ctx)
		at := time.Since(sent)
		if s != "" {
			status = s
		}
		if ctx.Err() != nil {
			return stillInProgress(ctx, status)
		}
		if err != nil {
			return err
		}
		if done {
			if learn {
				c.latencies.observe(kind, notDoneAt, at, grid)
			}
			return nil
		}
		grid = c.pollGrid()
		switch {
		case due && notDoneAt == 0:
			// The tick after the one just looked at, counted from that
			// tick: a step counted from the answer, which takes a batched
			// call's time to come, skipped it whenever the call took longer
			// than the look's distance to its tick, and the change, due
			// then, was seen a whole tick late.
			after := next.Add(grid)
			if now := time.Now(); now.After(after) {
				after = now
			}
			next = alignUp(after, grid)
		case learn && !due:
			// No estimate yet: the next look half as late again after the
			// send as this one was meant to be, so that of the two looks
			// either side of the change the later is at most half as late
			// again as the earlier, and the midpoint the next waits start
			// from is within a quarter of the change's time of it, after a
			// few looks whatever EC2's speed. Counted from the send, not
			// from this look, the grid's rounding does not add up.
			cold += min(max(cold/2, c.cfg.PollInterval), c.cfg.PollMaxInterval)
			next = alignUp(sent.Add(cold), grid)
			if now := time.Now(); next.Before(now) {
				next = alignUp(now, grid)
			}
		default:
			next = alignUp(time.Now().Add(pause), grid)
			pause = min(pause+pause/2, c.cfg.PollMaxInterval)
		}
		notDoneAt = at
	}
}

// awaitLook books a wait's look at next (see lookBook) and sleeps until
// then. A wait alone on that tick, with others booked on the next one of
// the fine grid, sleeps until that one instead, to look in their call: one
// call fewer for a grid step more of this wait. On the coarse grid used
// while EC2 throttles a step is too long to wait for that. It returns the
// tick to look at, or ctx's error.
func (c *ec2Cloud) awaitLook(ctx context.Context, next time.Time, grid time.Duration) (time.Time, error) {
	c.looks.book(next)
	if err := sleepUntil(ctx, next); err != nil {
		c.looks.cancel(next)
		return next, err
	}
	later := next.Add(grid)
	if grid <= 0 || grid != c.cfg.PollGrid || !c.looks.joinLater(next, later) {
		return next, nil
	}
	if err := sleepUntil(ctx, later); err != nil {
		c.looks.cancel(later)
		return later, err
	}
	return later, nil
}

// sentAt returns when the SDK sent the attempt that answered a call, from
// the call's result metadata md (see apimetrics.SentAt), or called (when
// the cloud layer called the SDK) when md does not say.
func sentAt(md middleware.Metadata, called time.Time) time.Time {
	if t, ok := apimetrics.SentAt(md); ok {
		return t
	}
	return called
}

// alignUp rounds t up to the next multiple of grid on the wall clock.
func alignUp(t time.Time, grid time.Duration) time.Time {
	if grid <= 0 {
		return t
	}
	if r := t.Truncate(grid); r.Before(t) {
		return r.Add(grid)
	}
	return t
}

// sleepUntil waits until t or until ctx ends, whichever is first.
func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

package cloud

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go/middleware"
	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/cloud/apimetrics"
)

// volumeCheck decides from one read of a volume (or the error of reading
// it) whether a wait is over; status says what it saw, for the error when
// time runs out.
type volumeCheck func(v types.Volume, err error) (done bool, status string, checkErr error)

// lookFunc is one look of a wait: at seen, what a call made for another wait
// brought in (see volumeWatches), or, when seen is nil, with a call of its
// own.
type lookFunc func(ctx context.Context, seen *seenVolume) (done bool, status string, err error)

// waitTransition waits until check reports done, for a state change of kind
// that a request this process sent at sent set off (see await).
func (c *ec2Cloud) waitTransition(ctx context.Context, kind transition, sent time.Time, check pollCheck) error {
	return c.await(ctx, kind, sent, nil, func(ctx context.Context, _ *seenVolume) (bool, string, error) { return check(ctx) })
}

// waitVolume waits until check reports done for a change of a volume
// (see await). Besides its own looks it takes what the DescribeVolumes
// calls made for other waits and requests show of the volume
// (volumeWatches), so that it looks in a call of its own only when none
// came when it meant to look, and even then ends on a read that another
// call brings in before its own answers (see lookAtVolume).
func (c *ec2Cloud) waitVolume(ctx context.Context, kind transition, sent time.Time, volumeID string, check volumeCheck) error {
	w := c.watches.watch(volumeID)
	defer c.watches.unwatch(w)
	return c.await(ctx, kind, sent, w, func(ctx context.Context, seen *seenVolume) (bool, string, error) {
		if seen != nil {
			return check(seen.volume, nil)
		}
		return c.lookAtVolume(ctx, w, check)
	})
}

// lookAtVolume is a wait's look with a call of its own at w's volume: what
// check makes of that call's answer, unless a read that another call
// answered meanwhile shows the change done first; the own call is then left
// (the batcher drops a lookup all of whose callers left before its call
// began). Waits that fall due together, as those of requests sent together
// do, join one DescribeVolumes call while it is on its way, and those that
// fall due during it queue for the next one (see batcher.Options): without
// this they would wait a round trip more for a call made for them alone. A
// read that does not show the change done is not taken: it was asked
// before the own call, which may well find it done.
func (c *ec2Cloud) lookAtVolume(ctx context.Context, w *volumeWatch, check volumeCheck) (bool, string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type answer struct {
		volume types.Volume
		err    error
	}
	own := make(chan answer, 1)
	asked := time.Now()
	go func() {
		v, err := c.describeVolume(ctx, w.id)
		own <- answer{v, err}
	}()
	for {
		select {
		case a := <-own:
			return check(a.volume, a.err)
		case s := <-w.seen:
			if !s.at.After(asked) {
				continue
			}
			if done, status, err := check(s.volume, nil); done || err != nil {
				return done, status, err
			}
		}
	}
}

// await waits until look reports done, for a state change of kind that a
// request this process sent at sent set off. That is when the attempt EC2
// took left (see sentAt), not when the cloud layer called the SDK: timed
// from the call, a request the SDK held back for seconds would have its
// first look come early and alone, and teach the estimate the delay. Each
// look has a window (see lookSchedule): a read another call brought in
// (through w, when the wait watches a volume) within it counts as the look,
// and when none came by its end the wait looks with a call of its own. A
// read that finds the change done ends the wait whenever it comes. What the
// wait sees teaches the estimate. A zero sent means the change was found
// under way, begun by a request this process did not time: the wait looks
// at once, as poll does, and learns nothing, since it cannot tell how long
// the change took.
func (c *ec2Cloud) await(ctx context.Context, kind transition, sent time.Time, w *volumeWatch, look lookFunc) error {
	s := c.newLookSchedule(kind, sent)
	var notDoneAt time.Duration
	var taken time.Time // reads answered before this were taken already
	status := "not looked at yet"
	// steer: the first look is where the schedule put it, so what it finds
	// steers the next first looks (see latencies.firstLookSeen); one pushed
	// onto the coarse grid while EC2 is strained looks later and would
	// steer them early.
	steer := s.estimated
	for {
		until := s.until
		if grid := c.throttledGrid(); grid > 0 {
			until = alignUp(until, grid)
			steer = steer && s.looks > 0
		}
		seen, err := awaitRead(ctx, w, until, taken)
		if err != nil {
			return stillInProgress(ctx, status)
		}
		done, st, err := look(ctx, seen)
		at := time.Now()
		if seen != nil {
			at = seen.at
		}
		taken = at
		if st != "" {
			status = st
		}
		if ctx.Err() != nil {
			return stillInProgress(ctx, status)
		}
		if err != nil {
			return err
		}
		if done {
			s.logDone(w, kind, at, notDoneAt)
			if s.learn {
				c.latencies.observe(kind, notDoneAt, s.taughtDone(notDoneAt, at.Sub(sent)))
			}
			if steer && s.looks == 0 {
				c.latencies.firstLookSeen(kind, true)
			}
			return nil
		}
		if at.Before(s.from) {
			// A read from before the window: the look still stands, and
			// what it saw teaches nothing. Another wait's call may bring
			// one in right after the request; taken as the change's lower
			// bound, it would halve the sample.
			continue
		}
		notDoneAt = at.Sub(sent)
		if steer && s.looks == 0 {
			c.latencies.firstLookSeen(kind, false) // only a look in the window counts
		}
		s.next(at)
	}
}

// doneInAnswer records a change that EC2's answer to its request already
// shows done, as an EC2-API cloud whose changes are instant answers (moto
// does): there is nothing to wait for, and the estimate learns that changes
// of the kind take no time, so that the waits of those that do not show done
// look at once. keysAndValues name the resource in the log.
func (c *ec2Cloud) doneInAnswer(kind transition, keysAndValues ...any) {
	c.latencies.observe(kind, 0, 0)
	klog.V(2).InfoS("EC2's answer shows the change done; nothing to wait for", append([]any{"change", kind}, keysAndValues...)...)
}

// awaitRead waits until until, and returns nil, or until w (when not nil)
// hands over a read answered after taken, and returns it. It fails only
// when ctx ends first.
func awaitRead(ctx context.Context, w *volumeWatch, until, taken time.Time) (*seenVolume, error) {
	var seen chan seenVolume // nil: never ready
	if w != nil {
		seen = w.seen
	}
	timer := time.NewTimer(time.Until(until))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timer.C:
			return nil, nil
		case s := <-seen:
			if s.at.After(taken) {
				return &s, nil
			}
		}
	}
}

// lookSchedule is when a wait looks: each look is a window, from..until,
// within which any read counts, and at whose end the wait makes a call of
// its own when none came.
type lookSchedule struct {
	cfg  Config
	sent time.Time
	// learn: the wait times its change (see await).
	learn bool
	// estimated: the first look was at the estimate (when changes of the
	// kind recently took); otherwise the wait climbs the cold ladder.
	estimated bool
	estimate  time.Duration
	// steady: changes of the kind recently took about the same time each
	// (see latencies.steady).
	steady bool
	// looks counts the windows passed.
	looks int
	// cold is the cold ladder's current rung, after the send; pause the
	// step of a wait that does not learn.
	cold, pause time.Duration
	from, until time.Time
}

// newLookSchedule returns the schedule of a wait for a change of kind sent
// at sent (zero: found under way) with its first window:
//   - a change of a kind whose time is estimated is first looked at when it
//     is due (see latencies.firstLookAt). When the kind's changes take
//     steady times (see latencies.steady), the window runs from the
//     estimate to a tenth after it and half a PollStep more: almost every
//     wait ends there, and the window lets waits due a moment apart share a
//     call. When their times vary, from a tenth before the first look to
//     half a PollStep after it: the first look is steered to the changes'
//     median, so half the waits end by then, and a window that ended later
//     would make every one of them later;
//   - a change of a kind no wait of this process has seen yet climbs a
//     ladder from ColdFirstLook after the send, each rung half as late
//     again (see next): the first waits after a start are few, and their
//     looks, shared, bracket the change within half its time in a few
//     looks whatever EC2's speed;
//   - a change found under way is looked at at once.
func (c *ec2Cloud) newLookSchedule(kind transition, sent time.Time) *lookSchedule {
	s := &lookSchedule{cfg: c.cfg, sent: sent, learn: !sent.IsZero(), cold: c.cfg.ColdFirstLook, pause: c.cfg.PollInterval}
	switch e, steady, ok := c.latencies.firstLookAt(kind); {
	case !s.learn:
		s.from, s.until = time.Now(), time.Now()
	case ok:
		s.estimated, s.estimate, s.steady = true, e, steady
		s.from, s.until = sent.Add(e), sent.Add(e+e/10+c.cfg.PollStep/2)
		if !s.steady {
			s.from, s.until = sent.Add(e-e/10), sent.Add(e+c.cfg.PollStep/2)
		}
	default:
		s.from, s.until = sent.Add(s.cold/2), sent.Add(s.cold)
	}
	return s
}

// logDone logs, at V(4), how a wait for a change of kind (of w's volume,
// when it watched one) ended: seen done at at, last seen not done at
// notDoneAt after the send, after how many looks, and where its first look
// was put, which is what tuning the schedule needs.
func (s *lookSchedule) logDone(w *volumeWatch, kind transition, at time.Time, notDoneAt time.Duration) {
	logger := klog.V(4)
	if !logger.Enabled() {
		return
	}
	volumeID := ""
	if w != nil {
		volumeID = w.id
	}
	var seenDone time.Duration
	if s.learn {
		seenDone = at.Sub(s.sent)
	}
	logger.InfoS("Change seen done", "change", kind, "volumeID", volumeID, "seenDoneAfter", seenDone, "lastNotDone", notDoneAt,
		"looks", s.looks, "estimated", s.estimated, "firstLook", s.estimate, "steady", s.steady)
}

// taughtDone is the time a wait that saw its change done at doneAt, last
// not done at notDoneAt, teaches as the change's end (see
// latencies.observe): doneAt, or the estimate when the first look, in a
// window that began at the estimate, found it done later in the window.
func (s *lookSchedule) taughtDone(notDoneAt, doneAt time.Duration) time.Duration {
	if notDoneAt == 0 && s.estimated {
		return min(doneAt, s.estimate)
	}
	return doneAt
}

// next moves the schedule on after a look at at that found the change not
// done; any read that comes after at counts as the next look:
//   - after the first look at the estimate of a kind whose times are
//     steady, the change is imminent: the next look is a tenth of the time
//     since the send later (at least a PollStep);
//   - after the first look of a kind whose times vary, a fifth: the changes
//     just past the median are the likeliest to end next;
//   - after later looks, a third of the time since the send
//     (at most PollMaxInterval): a change seen that late is seen at most a
//     third later than it happened, and a slow one costs a look per third of
//     its time, most of them shared with other waits;
//   - on the cold ladder, the next rung is half as late again after the
//     send as the last (at most PollMaxInterval further);
//   - a wait that does not learn looks PollInterval later, the step growing
//     by half each time up to PollMaxInterval.
func (s *lookSchedule) next(at time.Time) {
	s.looks++
	var step time.Duration
	switch elapsed := at.Sub(s.sent); {
	case !s.learn:
		step = s.pause
		s.pause = min(s.pause+s.pause/2, s.cfg.PollMaxInterval)
	case s.estimated && s.steady && s.looks == 1:
		step = max(elapsed/10, s.cfg.PollStep)
	case s.estimated && s.looks == 1:
		step = max(elapsed/5, s.cfg.PollStep)
	case s.estimated:
		step = min(max(elapsed/3, s.cfg.PollStep), s.cfg.PollMaxInterval)
	default:
		s.cold += min(max(s.cold/2, s.cfg.PollStep), s.cfg.PollMaxInterval)
		step = max(s.sent.Add(s.cold).Sub(at), s.cfg.PollStep)
	}
	s.from, s.until = at, at.Add(step)
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

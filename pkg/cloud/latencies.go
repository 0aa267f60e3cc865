package cloud

import (
	"math"
	"slices"
	"sync"
	"time"
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

// shiftSamples is how many of the most recent samples, all far on one side
// of the median (more than a third below it, or more than half above),
// show that EC2 changed speed (or that a fresh process's first guesses
// were far off): the estimate is then their median alone. Waits sent
// together and seen together add their samples together, so a median of
// latencySamples would take several such waves to follow. Against EBS-like
// times that vary (a lognormal spread of 0.7), five in a row land that far
// above the median about once in 600 waits.
const shiftSamples = 5

// latencies learns how long EC2 takes to make each kind of state change,
// from the waits themselves, so that a wait looks first when the change is
// due instead of polling from the start. It is safe for concurrent use.
type latencies struct {
	mu      sync.Mutex
	samples map[transition][]time.Duration // most recent last
	// notDone holds, per kind, the last look of each recent wait that found
	// the change not done yet (most recent last): each is a time the change
	// took longer than, which bounds how far below a first look's time the
	// change can have been.
	notDone map[transition][]time.Duration
	// firstLook holds, per kind whose times vary (see steady), when its
	// waits look first (see firstLookAt).
	firstLook map[transition]time.Duration
}

func newLatencies() *latencies {
	return &latencies{samples: map[transition][]time.Duration{}, notDone: map[transition][]time.Duration{}, firstLook: map[transition]time.Duration{}}
}

// firstLookStep is how far one first look moves the next ones (see
// firstLookSeen): a factor of about e^±0.03, enough to follow a change of
// EC2's speed within a few dozen waits (a halving in 21 first looks that
// find the change done, a doubling in 26 that do not), little enough that
// the first look stays near where it belongs: a first look that comes a
// tenth late makes every wait it ends a tenth late. At e^±0.05 the first
// looks of EBS-like 2-second attaches, simulated, spread from 1.62 s to
// 2.29 s between their 10th and 90th percentiles.
const firstLookStep = 0.03

// firstLookDoneShare is the share of first looks, of a kind whose times
// vary, that find the change done once the steering settles (see
// firstLookSeen): a little under half, so that the first look comes a
// little before the changes' median (at EBS's spread, at about 0.92 of it)
// and the second a fifth after the first, at about 1.1 of it (see
// lookSchedule.next). Steered to the median itself, the median wait ended
// at the first look or at the second, a fifth later, by chance. In 60
// simulated runs of 600 EBS-like lifecycles, 10 at a time
// (simulateSharedWaits), the waits' median missed its aim (a tenth over
// the changes' median and 100 ms) for 22 of the 180 kinds of change at
// half and e^±0.05, and for 3 at this share and firstLookStep, for 4.5 %
// more calls (3.86 per lifecycle against 3.69).
const firstLookDoneShare = 0.45

// firstLookAt returns when a wait for a change of kind looks first, and
// whether changes of the kind take steady times (see steady); false when
// there are no samples yet. For steady kinds it is the estimate (see
// expected). For kinds whose times vary, the midpoints the samples are made
// of sit above the change (a wait sees it done only some way after it
// happened) and a first look that finds it done says only that it took less,
// so their median drifts above the changes' own median; instead the first
// look is steered: a bit later after each first look that finds the change
// not done, a bit earlier after each that finds it done (see
// firstLookSeen), until firstLookDoneShare of them find it done.
func (l *latencies) firstLookAt(kind transition) (at time.Duration, steady, ok bool) {
	e, ok := l.expected(kind)
	if !ok {
		return 0, false, false
	}
	steady = l.steady(kind)
	l.mu.Lock()
	defer l.mu.Unlock()
	if steady {
		delete(l.firstLook, kind)
		return e, true, true
	}
	if l.firstLook[kind] == 0 {
		l.firstLook[kind] = e
	}
	return l.firstLook[kind], false, true
}

// firstLookSeen moves the first look of a kind whose times vary (see
// firstLookAt) by what a wait's first look found: later by a step weighted
// by firstLookDoneShare when it found the change not done, earlier by one
// weighted by the rest when done, so that the moves balance where that
// share of first looks finds it done.
func (l *latencies) firstLookSeen(kind transition, done bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	at, ok := l.firstLook[kind]
	if !ok {
		return
	}
	step := 2 * firstLookStep * firstLookDoneShare
	if done {
		step = -2 * firstLookStep * (1 - firstLookDoneShare)
	}
	l.firstLook[kind] = max(time.Duration(float64(at)*math.Exp(step)), time.Millisecond)
}

// expected returns how long changes of kind recently took: the median of
// the recent samples, or of the last shiftSamples when they all lie far on
// one side of it. It returns false when there are no samples yet.
func (l *latencies) expected(kind transition) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.samples[kind]
	if len(s) == 0 {
		return 0, false
	}
	est := median(s)
	if len(s) <= shiftSamples {
		return est, true
	}
	recent := s[len(s)-shiftSamples:]
	below, above := 0, 0
	for _, d := range recent {
		switch {
		case d < est-est/3:
			below++
		case d > est+est/2:
			above++
		}
	}
	if below == shiftSamples || above == shiftSamples {
		return median(recent), true
	}
	return est, true
}

// steady reports whether changes of kind recently took about the same time
// each (the middle half of the samples within a fifth of their median and
// 50 ms), as on a backend with fixed times, or varied, as EBS's do. Before
// there are enough samples to tell it reports true.
func (l *latencies) steady(kind transition) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.steadyLocked(kind)
}

// steadyLocked is steady with l.mu held.
func (l *latencies) steadyLocked(kind transition) bool {
	s := l.samples[kind]
	if len(s) < shiftSamples {
		return true
	}
	sorted := slices.Clone(s)
	slices.Sort(sorted)
	q25, q50, q75 := sorted[len(sorted)/4], sorted[len(sorted)/2], sorted[len(sorted)*3/4]
	return q75-q25 <= q50/5+50*time.Millisecond
}

// observe records a wait that saw the change done at doneAt after the
// request, having seen it not done at notDoneAt (zero when the first look
// found it done). The change happened in between; the midpoint is the
// sample, or, for a kind whose times are steady, the point a quarter of the
// way up from notDoneAt. A steady kind's first window runs from the
// estimate to a tenth after it (see newLookSchedule): an estimate a little
// under the change still sees it done within the window, one over it makes
// every wait later by as much, and two looks of one wait, a tenth of the
// time apart, leave a wide bracket. In make bench's 500 lifecycles a
// hundred at a time, a wave of attaches seen not done at 1.98 s and done at
// 2.17 s taught 2.07 s, and the next wave, first looking at 2.07 s, was
// seen done at its window's end, 2.32 s.
//
// A look that found the change done at once says only that it took no
// longer; when that look was in a window that began at the estimate, the
// caller passes the estimate as doneAt, since the change may well have been
// done by then and a look later in the window only says the estimate may be
// high. The sample is the midpoint between doneAt and the highest recent
// not-done look of another wait below it, or half of doneAt when none is
// below: against a steady EC2 the not-done looks of the other waits hem the
// sample in close under the change, and against one that got faster (or
// for a fresh process's first waits, which look early) the estimate halves
// with each wave of waits, so that a fast backend is learnt in a few waits
// rather than a step at a time.
func (l *latencies) observe(kind transition, notDoneAt, doneAt time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var sample time.Duration
	if notDoneAt > 0 {
		sample = (notDoneAt + doneAt) / 2
		if l.steadyLocked(kind) {
			sample = notDoneAt + (doneAt-notDoneAt)/4
		}
		l.notDone[kind] = keepRecent(l.notDone[kind], notDoneAt)
	} else {
		below, _ := highestBelow(l.notDone[kind], doneAt)
		sample = (below + doneAt) / 2
	}
	l.samples[kind] = keepRecent(l.samples[kind], sample)
}

// median returns the middle of s (the upper one of an even count).
func median(s []time.Duration) time.Duration {
	sorted := slices.Clone(s)
	slices.Sort(sorted)
	return sorted[len(sorted)/2]
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

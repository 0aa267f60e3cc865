package cloud

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// simChange is one kind of change a simulated lifecycle waits for: its
// draws are lognormal with this median and 99th percentile (the median
// every time when they are equal).
type simChange struct {
	kind        transition
	median, p99 time.Duration
}

// draw returns one change's time.
func (c simChange) draw(rng *rand.Rand) time.Duration {
	if c.p99 <= c.median {
		return c.median
	}
	sigma := math.Log(float64(c.p99)/float64(c.median)) / 2.3263478740408408
	return time.Duration(float64(c.median) * math.Exp(sigma*rng.NormFloat64()))
}

// simWait is one wait of a simulated lifecycle.
type simWait struct {
	s         *lookSchedule
	sent      time.Time
	takes     time.Duration
	notDoneAt time.Duration
}

// simResult is what a simulation measured.
type simResult struct {
	// calls are the DescribeVolumes calls the waits made, per lifecycle.
	calls float64
	// waited are each change's waits' times, and beyond each one's time
	// less its change's.
	waited, beyond map[transition][]time.Duration
	// drawn are the changes' times.
	drawn map[transition][]time.Duration
}

// simGap bounds the time between the end of a simulated lifecycle's change
// and the request for its next: without it, the lifecycles of a backend of
// fixed times would go in lockstep and share every look.
const simGap = 50 * time.Millisecond

// simulateSharedWaits plays lifecycles lifecycles, concurrency at a time,
// each waiting for changes one after the other, through the real look
// schedule and estimates, on a simulated clock of millisecond ticks: a
// wait whose window ends with no read makes a call, and every call in a
// tick reads every volume being waited for (as volumeWatches hands reads
// over), so one call serves every wait that looks in that tick. A call
// answers in the tick it is made; the next change of a lifecycle is sent
// up to simGap after the last ended (the RPCs between take their time). As the controller does, a lifecycle looks
// its name up before the first change (a call of its own) and reads its
// volume before the second (a call that reads every watched volume too).
func simulateSharedWaits(cfg Config, changes []simChange, lifecycles, concurrency int, seed uint64) simResult {
	c := &ec2Cloud{cfg: cfg.withDefaults(), latencies: newLatencies()}
	rng := rand.New(rand.NewPCG(seed, seed))
	res := simResult{waited: map[transition][]time.Duration{}, beyond: map[transition][]time.Duration{}, drawn: map[transition][]time.Duration{}}
	type worker struct {
		step int // index into changes
		w    *simWait
	}
	now := time.Unix(1000, 0)
	calls, started := 0, 0
	read := false // a lookup reads the watched volumes in the next tick
	start := func(wk *worker, at time.Time) {
		switch wk.step {
		case 0:
			calls++ // the name's lookup
		case 1:
			read = true
		}
		ch := changes[wk.step]
		wk.w = &simWait{s: c.newLookSchedule(ch.kind, at), sent: at, takes: ch.draw(rng)}
	}
	workers := make([]*worker, concurrency)
	for i := range workers {
		workers[i] = &worker{}
		if started < lifecycles {
			started++
			start(workers[i], now)
		}
	}
	for slices.ContainsFunc(workers, func(wk *worker) bool { return wk.w != nil }) {
		now = now.Add(time.Millisecond)
		look := read
		read = false
		for _, wk := range workers {
			if wk.w != nil && !now.Before(wk.w.s.until) {
				look = true
			}
		}
		if !look {
			continue
		}
		calls++
		for _, wk := range workers {
			w := wk.w
			if w == nil || !now.After(w.sent) {
				continue
			}
			elapsed := now.Sub(w.sent)
			ch := changes[wk.step]
			if elapsed < w.takes {
				w.notDoneAt = elapsed
				if !now.Before(w.s.from) {
					if w.s.estimated && w.s.looks == 0 {
						c.latencies.firstLookSeen(ch.kind, false)
					}
					w.s.next(now)
				}
				continue
			}
			c.latencies.observe(ch.kind, w.notDoneAt, w.s.taughtDone(w.notDoneAt, elapsed))
			if w.s.estimated && w.s.looks == 0 {
				c.latencies.firstLookSeen(ch.kind, true)
			}
			res.waited[ch.kind] = append(res.waited[ch.kind], elapsed)
			res.beyond[ch.kind] = append(res.beyond[ch.kind], elapsed-w.takes)
			res.drawn[ch.kind] = append(res.drawn[ch.kind], w.takes)
			wk.w = nil
			wk.step++
			if wk.step == len(changes) {
				if started == lifecycles {
					continue
				}
				started++
				wk.step = 0
			}
			start(wk, now.Add(time.Millisecond+time.Duration(rng.Int64N(int64(simGap)))))
		}
	}
	res.calls = float64(calls) / float64(lifecycles)
	return res
}

// ebsChanges are the ebs latency profile's volume changes (the emulator's
// EBSLatencies).
var ebsChanges = []simChange{
	{transitionCreate, 3 * time.Second, 15 * time.Second},
	{transitionAttach, 2 * time.Second, 10 * time.Second},
	{transitionDetach, 3 * time.Second, 20 * time.Second},
}

// TestSharedWaitsMeetTheAims plays 600 lifecycles (create, attach,
// detach), 10 at a time, against backends of the speeds make bench runs,
// and 500 a hundred at a time against fixed times, as make bench's 500x100
// run: waves of waits sent together and due together, whose estimates a
// fresh process learns from five waves (seeded draws, ten seeds each)
// through the real schedule and estimates
// (simulateSharedWaits), and checks the waits against the aims of
// docs/performance.md ("Backends of other speeds"): for each change, the waits'
// median at most a tenth over the changes' median and 100 ms, their 99th
// percentile at most a fifth over the changes' and 200 ms; and the calls
// per lifecycle (the lookups included) at most the bound, which is what
// the schedule costs today with a little room: a change that makes waits
// look more often fails here before it shows in make bench. Where the
// waves of waits go in lockstep (a hundred at a time), each wave after the
// first must end with a median at most a tenth over the change's: the
// simulation's calls answer at once, and the aim's 100 ms more are what a
// hundred real calls take on two cores (make bench: 50 to 150 ms more per
// wave than simulated).
func TestSharedWaitsMeetTheAims(t *testing.T) {
	fixed := func(d time.Duration) []simChange {
		return []simChange{{transitionCreate, d, d}, {transitionAttach, d, d}, {transitionDetach, d, d}}
	}
	tests := []struct {
		name                    string
		changes                 []simChange
		lifecycles, concurrency int
		maxCalls                float64
		// misses is how many of the 30 medians (3 changes, 10 seeds) may
		// miss their aim: none. With times that vary, a median of 600
		// waits can sit between two looks; first looks steered to the
		// changes' median put one of these 30 there (60 seeds: 22 of 180),
		// steered a little below it none (60 seeds: 3 of 180).
		misses int
		// waves: check each wave of concurrency waits after the first.
		waves bool
	}{
		{name: "ebs", changes: ebsChanges, lifecycles: 600, concurrency: 10, maxCalls: 3.95},
		{name: "fixed", changes: fixed(2 * time.Second), lifecycles: 600, concurrency: 10, maxCalls: 1.6},
		{name: "fixed, 100 at a time", changes: fixed(2 * time.Second), lifecycles: 500, concurrency: 100, maxCalls: 1.15, waves: true},
		{name: "slow", changes: fixed(10 * time.Second), lifecycles: 600, concurrency: 10, maxCalls: 1.6},
		{name: "instant", changes: fixed(0), lifecycles: 600, concurrency: 10, maxCalls: 1.55},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			const seeds = 10
			calls, misses := 0.0, 0
			for seed := uint64(1); seed <= seeds; seed++ {
				r := simulateSharedWaits(Config{}, tc.changes, tc.lifecycles, tc.concurrency, seed)
				calls += r.calls / seeds
				for _, ch := range tc.changes {
					w, d := r.waited[ch.kind], r.drawn[ch.kind]
					if p50, aim := pct(w, 50), pct(d, 50)*11/10+100*time.Millisecond; p50 > aim {
						t.Logf("seed %d, %s: median %v, aim %v", seed, ch.kind, p50, aim)
						misses++
					}
					if p99, aim := pct(w, 99), pct(d, 99)*12/10+200*time.Millisecond; p99 > aim {
						t.Errorf("seed %d, %s: 99th percentile %v, aim %v", seed, ch.kind, p99, aim)
					}
					for i := tc.concurrency; tc.waves && i+tc.concurrency <= len(w); i += tc.concurrency {
						if p50, aim := pct(w[i:i+tc.concurrency], 50), pct(d, 50)*11/10; p50 > aim {
							t.Errorf("seed %d, %s: wave %d's median %v, want at most %v", seed, ch.kind, i/tc.concurrency+1, p50, aim)
						}
					}
				}
			}
			t.Logf("%.2f calls per lifecycle; %d medians over their aim", calls, misses)
			if calls > tc.maxCalls {
				t.Errorf("%.2f calls per lifecycle, want at most %.2f", calls, tc.maxCalls)
			}
			if misses > tc.misses {
				t.Errorf("%d medians over their aim, want at most %d", misses, tc.misses)
			}
		})
	}
}

// pct returns the p-th percentile (nearest rank) of ds.
func pct(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[max(rank, 1)-1]
}

package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"
)

// transition names one kind of asynchronous state change, for drawing its
// duration from the configured Latencies.
type transition int

const (
	transitionVolumeCreate transition = iota
	transitionVolumeDelete
	transitionAttach
	transitionDetach
	transitionSnapshot
	transitionModify
	transitionOptimize
	transitionInstanceStop
	transitionInstanceStart

	// transitionKinds counts the kinds above.
	transitionKinds
)

// of returns the duration l gives the transition.
func (l Latencies) of(t transition) time.Duration {
	switch t {
	case transitionVolumeCreate:
		return l.VolumeCreate
	case transitionVolumeDelete:
		return l.VolumeDelete
	case transitionAttach:
		return l.Attach
	case transitionDetach:
		return l.Detach
	case transitionSnapshot:
		return l.Snapshot
	case transitionModify:
		return l.Modify
	case transitionOptimize:
		return l.Optimize
	case transitionInstanceStop:
		return l.InstanceStop
	case transitionInstanceStart:
		return l.InstanceStart
	}
	panic(fmt.Sprintf("model: unknown transition %d", t))
}

// String is the change's name in a Draw.
func (t transition) String() string {
	switch t {
	case transitionVolumeCreate:
		return "create"
	case transitionVolumeDelete:
		return "delete"
	case transitionAttach:
		return "attach"
	case transitionDetach:
		return "detach"
	case transitionSnapshot:
		return "snapshot"
	case transitionModify:
		return "modify"
	case transitionOptimize:
		return "optimize"
	case transitionInstanceStop:
		return "instance-stop"
	case transitionInstanceStart:
		return "instance-start"
	}
	return fmt.Sprintf("transition(%d)", int(t))
}

// Draw is the time one state change was given, as GET /transitions on the
// admin API reports it: with the ebs profile each change takes its own
// time, and a client measured against the emulator (make bench) needs each
// one's to tell its own delay from EC2's.
type Draw struct {
	// Resource is the volume (create, delete, attach, detach, modify,
	// optimize), snapshot or instance (instance-stop, instance-start) the
	// change is of.
	Resource string `json:"resource"`
	// Change is create, delete, attach, detach, snapshot, modify,
	// optimize, instance-stop or instance-start.
	Change string `json:"change"`
	// Began is when the request (or, for optimize, the modification's
	// first phase) set the change off.
	Began time.Time `json:"began"`
	// Takes is how long after Began the change completes (unless a fault
	// holds it).
	Takes time.Duration `json:"takes"`
}

// maxDraws is how many draws the emulator remembers for GET /transitions,
// the oldest forgotten first: a few MiB, many runs of make bench.
const maxDraws = 100000

// z99 is the standard normal distribution's 99th percentile: a lognormal
// duration with median m and spread σ has its 99th percentile at
// m·exp(σ·z99).
const z99 = 2.3263478740408408

// latencyDraws draws the durations of transitions. EC2's own times are
// not constants: most changes finish near a typical time and a few take
// many times longer. A transition whose Latencies.P99 is above its median
// takes a lognormal time with that median and 99th percentile; one without
// takes its median exactly.
//
// Each kind of transition draws from a sequence of its own: with a seed,
// the nth attach takes the same time in every run, however the attaches
// interleave with the other changes. Two clients measured side by side,
// each against its own emulator, so meet the same times for the same
// changes, and their figures differ by what they did rather than by which
// draws each happened to take.
type latencyDraws struct {
	cfg Latencies
	mu  sync.Mutex
	rng [transitionKinds]*rand.Rand
	// log holds the last maxDraws draws, oldest first.
	log []Draw
}

func newLatencyDraws(cfg Latencies, seed uint64) *latencyDraws {
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	d := &latencyDraws{cfg: cfg}
	for t := range d.rng {
		// A distinct stream per kind: the golden-ratio increment keeps the
		// kinds' second seeds far apart.
		d.rng[t] = rand.New(rand.NewPCG(seed, seed^(uint64(t+1)*0x9e3779b97f4a7c15)))
	}
	return d
}

// due draws how long a transition of kind t of resource, set off at now,
// takes, records the draw, and returns when the transition is due.
func (d *latencyDraws) due(t transition, resource string, now time.Time) time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	takes := d.drawLocked(t)
	if len(d.log) == maxDraws {
		d.log = slices.Delete(d.log, 0, maxDraws/10)
	}
	d.log = append(d.log, Draw{Resource: resource, Change: t.String(), Began: now.UTC(), Takes: takes})
	return now.Add(takes)
}

// drawLocked returns how long one transition of kind t takes.
func (d *latencyDraws) drawLocked(t transition) time.Duration {
	median := d.cfg.of(t)
	if d.cfg.P99 == nil || median <= 0 {
		return median
	}
	p99 := d.cfg.P99.of(t)
	if p99 <= median {
		return median
	}
	sigma := math.Log(float64(p99)/float64(median)) / z99
	return time.Duration(float64(median) * math.Exp(sigma*d.rng[t].NormFloat64()))
}

// draws returns the remembered draws, oldest first.
func (d *latencyDraws) draws() []Draw {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.log)
}

// Draws returns the times the cloud's recent state changes were given,
// oldest first (the last 100000; see Draw).
func (c *Cloud) Draws() []Draw {
	return c.latency.draws()
}

// LatencyProfiles are the named sets of latencies the emulator offers, so
// that a client can be measured against backends of different speeds with
// one flag (docs/emulator.md, "Latency profiles"):
//
//   - instant: every change completes at the first look after the request,
//     as on a mock (moto) or a very fast cloud;
//   - fixed: DefaultLatencies, the same few seconds every time;
//   - ebs: EBS-like, each change's time lognormal around a typical median
//     with a long tail (EbsLatencies);
//   - slow: ten seconds for every volume change, as on a slow EC2-API cloud
//     (thirty for a snapshot and an instance's stop or start).
var LatencyProfiles = map[string]func() Latencies{
	"instant": func() Latencies { return Latencies{} },
	"fixed":   DefaultLatencies,
	"ebs":     EBSLatencies,
	"slow":    SlowLatencies,
}

// LatencyProfile returns the named profile's latencies.
func LatencyProfile(name string) (Latencies, error) {
	if p, ok := LatencyProfiles[name]; ok {
		return p(), nil
	}
	return Latencies{}, fmt.Errorf("latency profile %q: want one of %s", name, strings.Join(LatencyProfileNames(), ", "))
}

// LatencyProfileNames lists the profiles, sorted.
func LatencyProfileNames() []string {
	names := make([]string, 0, len(LatencyProfiles))
	for n := range LatencyProfiles {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// EBSLatencies are EBS-like times. AWS publishes no distribution; these
// medians are the times a volume typically takes, and the 99th
// percentiles the long tails users report (a create or attach now and then
// taking ten or more seconds, a detach twenty): create median 3 s, p99
// 15 s; delete 2 s, 10 s; attach 2 s, 10 s; detach 3 s, 20 s; a small
// snapshot 10 s, 60 s; a modification 3 s, 15 s, then optimizing 5 s,
// 30 s. An instance's guest shuts down in 30 s (p99 2 min) and boots in
// 15 s (1 min).
func EBSLatencies() Latencies {
	return Latencies{
		VolumeCreate: 3 * time.Second, VolumeDelete: 2 * time.Second,
		Attach: 2 * time.Second, Detach: 3 * time.Second,
		Snapshot: 10 * time.Second, Modify: 3 * time.Second, Optimize: 5 * time.Second,
		InstanceStop: 30 * time.Second, InstanceStart: 15 * time.Second,
		P99: &Latencies{
			VolumeCreate: 15 * time.Second, VolumeDelete: 10 * time.Second,
			Attach: 10 * time.Second, Detach: 20 * time.Second,
			Snapshot: 60 * time.Second, Modify: 15 * time.Second, Optimize: 30 * time.Second,
			InstanceStop: 2 * time.Minute, InstanceStart: time.Minute,
		},
	}
}

// SlowLatencies are ten seconds for every volume change, thirty for a
// snapshot and for an instance's stop or start.
func SlowLatencies() Latencies {
	return Latencies{
		VolumeCreate: 10 * time.Second, VolumeDelete: 10 * time.Second,
		Attach: 10 * time.Second, Detach: 10 * time.Second,
		Snapshot: 30 * time.Second, Modify: 10 * time.Second, Optimize: 10 * time.Second,
		InstanceStop: 30 * time.Second, InstanceStart: 30 * time.Second,
	}
}

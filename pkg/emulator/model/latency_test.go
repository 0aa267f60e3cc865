package model

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestLatencyDraws checks the draws of transition times: a fixed latency
// every time, and a varying one whose draws have the configured median and
// 99th percentile, the same again from the same seed.
func TestLatencyDraws(t *testing.T) {
	fixed := newLatencyDraws(DefaultLatencies(), 1)
	for range 100 {
		if d := fixed.drawLocked(transitionAttach); d != DefaultLatencies().Attach {
			t.Fatalf("fixed attach latency drew %s", d)
		}
	}
	tests := []struct {
		name        string
		kind        transition
		median, p99 time.Duration
	}{
		{"create", transitionVolumeCreate, 3 * time.Second, 15 * time.Second},
		{"detach", transitionDetach, 3 * time.Second, 20 * time.Second},
		{"snapshot", transitionSnapshot, 10 * time.Second, 60 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			const n = 20000
			draws := newLatencyDraws(EBSLatencies(), 42)
			again := newLatencyDraws(EBSLatencies(), 42)
			ds := make([]time.Duration, n)
			for i := range ds {
				ds[i] = draws.drawLocked(tc.kind)
				if d := again.drawLocked(tc.kind); d != ds[i] {
					t.Fatalf("draw %d: %s, then %s from the same seed", i, ds[i], d)
				}
			}
			slices.Sort(ds)
			median, p99 := ds[n/2], ds[n*99/100]
			if !within(median, tc.median, 0.05) || !within(p99, tc.p99, 0.1) {
				t.Fatalf("%d draws: median %s (want %s), p99 %s (want %s)", n, median, tc.median, p99, tc.p99)
			}
		})
	}
	// A tail below the median, or no median, draws the median.
	l := Latencies{Attach: 2 * time.Second, P99: &Latencies{Attach: time.Second, Detach: time.Second}}
	d := newLatencyDraws(l, 1)
	if got := d.drawLocked(transitionAttach); got != 2*time.Second {
		t.Errorf("a tail below the median drew %s", got)
	}
	if got := d.drawLocked(transitionDetach); got != 0 {
		t.Errorf("an instant change with a tail drew %s", got)
	}
}

func within(got, want time.Duration, frac float64) bool {
	diff := float64(got - want)
	return diff <= frac*float64(want) && -diff <= frac*float64(want)
}

func TestLatencyProfiles(t *testing.T) {
	for _, name := range LatencyProfileNames() {
		l, err := LatencyProfile(name)
		if err != nil {
			t.Fatal(err)
		}
		for k := transitionVolumeCreate; k <= transitionOptimize; k++ {
			if l.of(k) < 0 || l.P99 != nil && l.P99.of(k) < l.of(k) {
				t.Errorf("profile %s, transition %d: median %s, tail %+v", name, k, l.of(k), l.P99)
			}
		}
	}
	if l, _ := LatencyProfile("instant"); l != (Latencies{}) {
		t.Errorf("instant profile %+v", l)
	}
	if _, err := LatencyProfile("warp"); err == nil {
		t.Error("an unknown profile was accepted")
	}
}

// TestCloudDrawsLatencies checks that the cloud gives each volume a time of
// its own under the ebs profile: half of many volumes created at once are
// available after the median, nearly all after the 99th percentile.
func TestCloudDrawsLatencies(t *testing.T) {
	tc := newTestCloud(t, Config{Latencies: EBSLatencies(), LatencySeed: 7})
	const n = 200
	ids := make([]string, n)
	for i := range ids {
		v, err := tc.CreateVolume(CreateVolumeInput{Zone: tc.local(t).Zone, Size: 1, Type: "gp3"})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = v.ID
	}
	available := func() int {
		page, err := tc.DescribeVolumes(Query{IDs: ids})
		if err != nil {
			t.Fatal(err)
		}
		count := 0
		for _, v := range page.Items {
			if v.State == VolumeAvailable {
				count++
			}
		}
		return count
	}
	tc.clock.Advance(3 * time.Second) // the median
	if got := available(); got < n*35/100 || got > n*65/100 {
		t.Errorf("%d of %d volumes available at the median, want about half", got, n)
	}
	tc.clock.Advance(12 * time.Second) // the 99th percentile
	if got := available(); got < n*96/100 {
		t.Errorf("%d of %d volumes available at the 99th percentile, want nearly all", got, n)
	}
}

// TestDrawsRecorded checks that every state change's drawn time is
// recorded as it is set off, and is the time the change really takes; a
// request refused (a dry run) draws nothing.
func TestDrawsRecorded(t *testing.T) {
	tc := newTestCloud(t, Config{Latencies: EBSLatencies(), LatencySeed: 7})
	zone := tc.local(t).Zone
	if _, err := tc.CreateVolume(CreateVolumeInput{Zone: zone, Size: 1, DryRun: true}); code(err) != CodeDryRunOperation {
		t.Fatalf("dry run: %v", err)
	}
	if ds := tc.Draws(); len(ds) != 0 {
		t.Fatalf("a dry run drew %+v", ds)
	}
	v, err := tc.CreateVolume(CreateVolumeInput{Zone: zone, Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	ds := tc.Draws()
	if len(ds) != 1 || ds[0].Resource != v.ID || ds[0].Change != "create" || !ds[0].Began.Equal(tc.clock.Now()) || ds[0].Takes <= 0 {
		t.Fatalf("after a create: %+v", ds)
	}
	tc.clock.Advance(ds[0].Takes - time.Millisecond)
	if got := tc.describe(t, v.ID).State; got != VolumeCreating {
		t.Fatalf("a millisecond before its drawn time: %s", got)
	}
	tc.clock.Advance(time.Millisecond)
	if got := tc.describe(t, v.ID).State; got != VolumeAvailable {
		t.Fatalf("at its drawn time: %s", got)
	}
	if _, err := tc.AttachVolume(AttachVolumeInput{VolumeID: v.ID, InstanceID: tc.local(t).ID, Device: "/dev/sdf"}); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.DetachVolume(DetachVolumeInput{VolumeID: v.ID}); err != nil {
		t.Fatal(err)
	}
	var changes []string
	for _, d := range tc.Draws() {
		if d.Resource != v.ID {
			t.Errorf("draw of %s, want %s", d.Resource, v.ID)
		}
		changes = append(changes, d.Change)
	}
	if want := []string{"create", "attach", "detach"}; !slices.Equal(changes, want) {
		t.Fatalf("changes drawn %v, want %v", changes, want)
	}
}

// TestDrawsRepeatPerKind checks that with a seed the nth change of a kind
// takes the same time whatever other changes came between: two clients
// measured side by side meet the same times for the same changes.
func TestDrawsRepeatPerKind(t *testing.T) {
	takes := func(interleave bool) map[string][]time.Duration {
		d := newLatencyDraws(EBSLatencies(), 11)
		for i := range 20 {
			d.due(transitionAttach, fmt.Sprintf("vol-a%d", i), time.Time{})
			if interleave && i%3 == 0 {
				d.due(transitionVolumeCreate, fmt.Sprintf("vol-c%d", i), time.Time{})
			}
			d.due(transitionDetach, fmt.Sprintf("vol-a%d", i), time.Time{})
		}
		byKind := map[string][]time.Duration{}
		for _, draw := range d.draws() {
			byKind[draw.Change] = append(byKind[draw.Change], draw.Takes)
		}
		return byKind
	}
	alone, between := takes(false), takes(true)
	for _, change := range []string{"attach", "detach"} {
		if !slices.Equal(alone[change], between[change]) {
			t.Errorf("%s times with creates between %v, want those without %v", change, between[change], alone[change])
		}
	}
}

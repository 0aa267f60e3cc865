package batcher

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestGetMany checks that many keys asked for at once fill batches of
// MaxEntries together, that each key gets its own answer, a missing key
// ErrNotFound and a key whose lookup failed the whole call only that call's
// error, and that duplicates are looked up once.
func TestGetMany(t *testing.T) {
	rec := &recorder{missing: map[string]bool{"k4": true}, errFor: map[string]error{"k5": errors.New("k5 broke")}}
	b, err := New(rec.exec, Options{Name: "test", MaxEntries: 3, MaxDelay: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	keys := []string{"k1", "k2", "k3", "k4", "k5", "k6", "k7", "k1"}
	got, err := b.GetMany(context.Background(), keys)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 7 {
		t.Fatalf("GetMany answered %d keys, want 7: %v", len(got), got)
	}
	for _, k := range []string{"k1", "k2", "k3", "k6", "k7"} {
		if r := got[k]; r.Err != nil || r.Value != "v-"+k {
			t.Errorf("%s: %+v, want v-%s", k, r, k)
		}
	}
	if r := got["k4"]; !errors.Is(r.Err, ErrNotFound) {
		t.Errorf("k4: %+v, want ErrNotFound", r)
	}
	if r := got["k5"]; r.Err == nil || r.Err.Error() != "k5 broke" {
		t.Errorf("k5: %+v, want its own error", r)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var asked []string
	for _, c := range rec.calls {
		if len(c) > 3 {
			t.Errorf("a batch of %d keys, want at most 3: %v", len(c), c)
		}
		asked = append(asked, c...)
	}
	if len(rec.calls) != 3 {
		t.Errorf("%d exec calls for 7 keys in batches of 3, want 3: %v", len(rec.calls), rec.calls)
	}
	slices.Sort(asked)
	if want := []string{"k1", "k2", "k3", "k4", "k5", "k6", "k7"}; !slices.Equal(asked, want) {
		t.Errorf("keys looked up %v, want each once: %v", asked, want)
	}
}

// TestGetManyCancelled checks that a caller whose context ends stops
// waiting with the context's error, and that a closed batcher answers
// ErrClosed for every key.
func TestGetManyCancelled(t *testing.T) {
	rec := &recorder{gate: make(chan struct{})}
	b, err := New(rec.exec, Options{Name: "test", MaxEntries: 2, MaxDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := b.GetMany(ctx, []string{"a", "b", "c"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("GetMany with a gated exec = %v, want the deadline", err)
	}
	close(rec.gate)
	b.Close()
	got, err := b.GetMany(context.Background(), []string{"a"})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(got["a"].Err, ErrClosed) {
		t.Errorf("after Close: %+v, want ErrClosed", got["a"])
	}
}

// TestGetManyArrivesAsOne: the keys of one GetMany reach the pending batch
// in one step. Even a batch timer that has fired by the time it starts (a
// machine so loaded that MaxDelay passes between two keys) cannot split
// them: 120 keys make one exec call, and 1,200 with MaxEntries 500 three.
func TestGetManyArrivesAsOne(t *testing.T) {
	fired := func(time.Duration) (<-chan time.Time, func()) {
		c := make(chan time.Time, 1)
		c <- time.Now()
		return c, func() {}
	}
	for _, tc := range []struct{ keys, maxEntries, wantCalls int }{{120, 500, 1}, {1200, 500, 3}} {
		t.Run(fmt.Sprintf("%d keys", tc.keys), func(t *testing.T) {
			rec := &recorder{}
			b, err := newBatcher(rec.exec, Options{Name: "test", MaxEntries: tc.maxEntries, MaxDelay: time.Hour}, fired)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			keys := make([]string, tc.keys)
			for i := range keys {
				keys[i] = fmt.Sprintf("k%d", i)
			}
			got, err := b.GetMany(context.Background(), keys)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.keys {
				t.Fatalf("GetMany answered %d keys, want %d", len(got), tc.keys)
			}
			if calls := rec.recorded(); len(calls) != tc.wantCalls {
				var sizes []int
				for _, c := range calls[:min(len(calls), 10)] {
					sizes = append(sizes, len(c))
				}
				t.Fatalf("%d exec calls (the first of %v keys), want %d", len(calls), sizes, tc.wantCalls)
			}
		})
	}
}

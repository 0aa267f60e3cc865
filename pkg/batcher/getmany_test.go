package batcher

import (
	"context"
	"errors"
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

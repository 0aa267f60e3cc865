package batcher

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/diskplane/diskplane/pkg/testutil"
)

// TestManyCallers runs hundreds of goroutines against a real-timer batcher,
// with duplicate keys, poisonous keys, missing keys and callers that give up,
// and checks every answer and every exec call's shape. Run it with -race.
func TestManyCallers(t *testing.T) {
	const (
		callers    = 400
		keySpace   = 60
		maxEntries = 16
	)
	poison := func(k int) bool { return k%17 == 5 }
	missing := func(k int) bool { return k%13 == 7 }
	var violations atomic.Int32
	exec := func(_ context.Context, keys []int) (map[int]Result[int], error) {
		seen := make(map[int]bool, len(keys))
		for _, k := range keys {
			if seen[k] {
				violations.Add(1) // duplicate key in one call
			}
			seen[k] = true
		}
		if len(keys) > maxEntries {
			violations.Add(1)
		}
		for _, k := range keys {
			if poison(k) {
				return nil, errPoison
			}
		}
		out := make(map[int]Result[int], len(keys))
		for _, k := range keys {
			if !missing(k) {
				out[k] = Result[int]{Value: k * 10}
			}
		}
		return out, nil
	}
	b, err := New(exec, Options{
		Name:         "stress",
		MaxEntries:   maxEntries,
		MaxDelay:     time.Millisecond,
		SplitOnError: func(err error) bool { return errors.Is(err, errPoison) },
	})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for i := range callers {
		wg.Go(func() {
			k := rand.IntN(keySpace)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			giveUp := i%10 == 0
			if giveUp {
				cancel()
			}
			v, err := b.Get(ctx, k)
			switch {
			case giveUp:
				// A caller that has given up may still have been answered
				// if its batch finished first; any other error is wrong.
				if err != nil && !errors.Is(err, context.Canceled) {
					errs <- fmt.Errorf("key %d (gave up): %v", k, err)
				}
			case poison(k):
				if !errors.Is(err, errPoison) {
					errs <- fmt.Errorf("key %d: err = %v, want the poison error", k, err)
				}
			case missing(k):
				if !errors.Is(err, ErrNotFound) {
					errs <- fmt.Errorf("key %d: err = %v, want ErrNotFound", k, err)
				}
			case err != nil || v != k*10:
				errs <- fmt.Errorf("key %d = %d, %v; want %d", k, v, err, k*10)
			}
		})
	}
	wg.Wait()
	b.Close()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := violations.Load(); n > 0 {
		t.Errorf("%d exec calls had duplicate keys or more than %d keys", n, maxEntries)
	}
	testutil.AssertNoGoroutines(t, "batcher.(*Batcher[")
}

// BenchmarkBatcher reports how many exec calls (EC2 requests) the batcher
// makes per lookup when many goroutines ask at once, against an exec func
// that takes as long as a typical Describe call. calls/op is the fraction of
// lookups that cost a request: 1.0 would mean no batching at all.
func BenchmarkBatcher(b *testing.B) {
	const apiLatency = 2 * time.Millisecond
	for _, bc := range []struct {
		name     string
		keySpace int
		// unknownEvery makes every n-th key unknown to the API, failing
		// the whole call it is in, as an unknown ID does in EC2; 0 means none.
		unknownEvery int
	}{
		{name: "distinct-keys", keySpace: 100000},
		{name: "hot-keys", keySpace: 20},
		{name: "one-percent-unknown-keys", keySpace: 100000, unknownEvery: 100},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var calls atomic.Int64
			exec := func(_ context.Context, keys []int) (map[int]Result[int], error) {
				calls.Add(1)
				time.Sleep(apiLatency)
				for _, k := range keys {
					if bc.unknownEvery > 0 && k%bc.unknownEvery == 0 {
						return nil, errPoison
					}
				}
				out := make(map[int]Result[int], len(keys))
				for _, k := range keys {
					out[k] = Result[int]{Value: k}
				}
				return out, nil
			}
			bt, err := New(exec, Options{
				Name: "bench", MaxEntries: 500, MaxDelay: time.Millisecond,
				SplitOnError: func(err error) bool { return errors.Is(err, errPoison) },
			})
			if err != nil {
				b.Fatal(err)
			}
			defer bt.Close()
			b.SetParallelism(64) // many RPCs waiting on the cloud at once
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					k := rand.IntN(bc.keySpace)
					_, err := bt.Get(context.Background(), k)
					if unknown := bc.unknownEvery > 0 && k%bc.unknownEvery == 0; unknown != (err != nil) {
						b.Errorf("key %d: err = %v", k, err)
						return
					}
				}
			})
			b.ReportMetric(float64(calls.Load())/float64(b.N), "calls/op")
		})
	}
}

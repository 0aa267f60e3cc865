package coalescer

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/diskplane/diskplane/pkg/testutil"
)

// TestManyCallers runs many goroutines against a real-timer coalescer with a
// few keys and randomly conflicting inputs, and checks that every accepted
// input was part of the execution its caller was told about, that only
// conflicts were rejected, and that executions for one key never overlapped.
// Run it with -race.
func TestManyCallers(t *testing.T) {
	const (
		callers = 300
		keys    = 5
	)
	m := &modifier{}
	// The execution answers with the change it applied.
	exec := func(ctx context.Context, key string, in change) (change, error) {
		_, err := m.exec(ctx, key, in)
		return in, err
	}
	c, err := New(mergeChanges, exec, Options{Name: "stress", Window: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for i := range callers {
		wg.Go(func() {
			key := fmt.Sprintf("vol-%d", i%keys)
			var in change
			switch rand.IntN(3) {
			case 0:
				in.SizeGiB = 10 + rand.IntN(3)
			case 1:
				in.IOPS = 3000 + rand.IntN(2)*1000
			default:
				in.Type = []string{"gp3", "io2"}[rand.IntN(2)]
			}
			executed, err := c.Do(context.Background(), key, in)
			switch {
			case errors.Is(err, errConflict):
			case err != nil:
				errs <- fmt.Errorf("%s %+v: unexpected error %v", key, in, err)
			default:
				// The executed change must contain this caller's input:
				// merging it in again changes nothing.
				if merged, err := mergeChanges(executed, in); err != nil || merged != executed {
					errs <- fmt.Errorf("%s %+v was answered with %+v, which does not include it", key, in, executed)
				}
			}
		})
	}
	wg.Wait()
	c.Close()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := m.overlapping(); n > 0 {
		t.Errorf("%d executions overlapped another for the same key", n)
	}
	testutil.AssertNoGoroutines(t, "coalescer.(*Coalescer[")
}

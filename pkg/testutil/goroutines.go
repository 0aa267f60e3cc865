package testutil

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// AssertNoGoroutines fails the test when goroutines whose stacks contain
// marker (e.g. "batcher.(*Batcher[") are still running, after giving them a
// few seconds to finish returning. Concurrency primitives use it to prove
// Close leaves nothing behind.
func AssertNoGoroutines(t testing.TB, marker string) {
	t.Helper()
	var stacks string
	for range 500 {
		buf := make([]byte, 1<<20)
		stacks = string(buf[:runtime.Stack(buf, true)])
		if !strings.Contains(stacks, marker) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("goroutines running %s outlived Close:\n%s", marker, stacks)
}

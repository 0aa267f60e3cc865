package coalescer

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// manualClock replaces the coalescer's timers so a test decides when a
// window ends.
type manualClock struct {
	started chan *manualTimer
}

type manualTimer struct {
	f       func()
	stopped chan struct{}
}

func newManualClock() *manualClock {
	return &manualClock{started: make(chan *manualTimer, 100)}
}

func (m *manualClock) afterFunc(_ time.Duration, f func()) func() {
	t := &manualTimer{f: f, stopped: make(chan struct{})}
	m.started <- t
	return func() { close(t.stopped) }
}

// next returns the next window timer the coalescer started, waiting for the
// owner goroutine to start it.
func (m *manualClock) next() *manualTimer { return <-m.started }

// fire ends the window; it returns once the owner goroutine has seen it.
func (mt *manualTimer) fire() { mt.f() }

// assertNoGoroutines fails when goroutines running code of this package
// remain, allowing them a moment to finish returning.
func assertNoGoroutines(t *testing.T, marker string) {
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

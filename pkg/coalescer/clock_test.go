package coalescer

import (
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

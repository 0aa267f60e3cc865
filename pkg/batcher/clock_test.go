package batcher

import (
	"testing"
	"time"
)

// manualClock replaces the batcher's timers so a test decides when a batch's
// delay has passed.
type manualClock struct {
	started chan *manualTimer
}

type manualTimer struct {
	d       time.Duration // what the batcher asked for
	c       chan time.Time
	stopped chan struct{}
}

func newManualClock() *manualClock {
	return &manualClock{started: make(chan *manualTimer, 100)}
}

func (m *manualClock) start(d time.Duration) (<-chan time.Time, func()) {
	t := &manualTimer{d: d, c: make(chan time.Time), stopped: make(chan struct{})}
	m.started <- t
	return t.c, func() { close(t.stopped) }
}

// next returns the timer the batcher started most recently after the
// previous call, waiting for the owner goroutine to start it.
func (m *manualClock) next(t *testing.T) *manualTimer {
	t.Helper()
	return <-m.started
}

// fire makes the timer expire; it returns once the owner goroutine has seen it.
func (mt *manualTimer) fire() { mt.c <- time.Now() }

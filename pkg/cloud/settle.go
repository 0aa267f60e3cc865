package cloud

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// sendLog remembers, by the controller's own monotonic clock, when this
// process started and when a request it sent that may have made a
// resource last ended a later lookup has to find: a volume for a name, a snapshot for
// a name, a modification of a volume. EC2's reads are eventually
// consistent, so until VisibilityTimeout after such a request a lookup that
// finds nothing proves nothing; before that, a retry must not make the
// resource a second time. A previous process's requests (before a restart
// or a leader change) are unknown, so for what they may have made the
// process's own start stands in as the time of the last request.
//
// A record stays for the whole window even after the request succeeded:
// knowing a snapshot was made does not make the next lookup show it, and a
// retry (the snapshotter asks again until the snapshot is ready) must not
// take that lookup for proof there is none. No timestamp from EC2 is ever
// compared with this clock: EC2's clock may run ahead or behind by minutes.
type sendLog struct {
	window  time.Duration
	started time.Time

	mu   sync.Mutex
	sent map[string]time.Time
}

func newSendLog(window time.Duration) *sendLog {
	return &sendLog{window: window, started: time.Now(), sent: map[string]time.Time{}}
}

// record notes that a request for key just ended, unless EC2 refused it
// (see refused): it may have been applied at any moment until now, so its
// resource may not show in EC2's reads until the window after now.
func (l *sendLog) record(key string, err error) {
	if err != nil && refused(err) {
		return
	}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, t := range l.sent {
		if now.Sub(t) >= l.window {
			delete(l.sent, k)
		}
	}
	l.sent[key] = now
}

// unsettled is how long until a lookup for key can be trusted to show what
// any earlier request made: zero once it can. withEarlierProcesses counts
// the requests of a previous process too (through this process's start).
func (l *sendLog) unsettled(key string, withEarlierProcesses bool) time.Duration {
	l.mu.Lock()
	last := l.sent[key]
	l.mu.Unlock()
	if withEarlierProcesses && l.started.After(last) {
		last = l.started
	}
	if last.IsZero() {
		return 0
	}
	return max(l.window-time.Since(last), 0)
}

// awaitSettled polls look, as every wait does, until it finds what an
// earlier request for key made or until a lookup can be trusted to show
// it (found is then false). When ctx ends first the error wraps
// ErrRetryLater and says how long the caller has left to wait.
func (c *ec2Cloud) awaitSettled(ctx context.Context, key string, withEarlierProcesses bool, what string,
	look func(ctx context.Context) (found bool, err error)) (bool, error) {
	found := false
	err := c.poll(ctx, func(ctx context.Context) (bool, string, error) {
		ok, err := look(ctx)
		if err != nil || ok {
			found = ok
			return true, "", err
		}
		if left := c.sends.unsettled(key, withEarlierProcesses); left > 0 {
			return false, fmt.Sprintf("%s may not show in EC2's reads for another %s", what, left.Round(time.Second)), nil
		}
		return true, "", nil
	})
	if err != nil && ctx.Err() != nil {
		return false, fmt.Errorf("%w: %w", ErrRetryLater, err)
	}
	return found, err
}

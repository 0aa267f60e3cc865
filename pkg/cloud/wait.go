package cloud

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// pollCheck looks at a resource once. It reports whether the wanted state
// is reached; status says what it saw, for the error when time runs out.
type pollCheck func(ctx context.Context) (done bool, status string, err error)

// poll calls check until it reports done or fails, looking at once and
// then as waitTransition does after a look that found it not done: for
// waits that no request of this process timed (a change found under way, a
// snapshot, EC2's reads catching up). When ctx ends first, the error wraps
// ErrInProgress and ctx's error and says what the last check saw.
func (c *ec2Cloud) poll(ctx context.Context, check pollCheck) error {
	return c.waitTransition(ctx, "", time.Time{}, check)
}

// stillInProgress is the error of a wait cut short by its context.
func stillInProgress(ctx context.Context, status string) error {
	return fmt.Errorf("%s when the wait ended: %w (%w)", status, ErrInProgress, context.Cause(ctx))
}

// cached holds one value fetched from the cloud for a while.
type cached[T any] struct {
	ttl time.Duration

	mu      sync.Mutex
	value   T
	expires time.Time
}

// get returns the cached value, or fetches and caches a new one when it has
// expired. A failed fetch is not cached.
func (c *cached[T]) get(ctx context.Context, fetch func(context.Context) (T, error)) (T, error) {
	c.mu.Lock()
	if time.Now().Before(c.expires) {
		v := c.value
		c.mu.Unlock()
		return v, nil
	}
	c.mu.Unlock()
	v, err := fetch(ctx)
	if err != nil {
		return v, err
	}
	c.mu.Lock()
	c.value, c.expires = v, time.Now().Add(c.ttl)
	c.mu.Unlock()
	return v, nil
}

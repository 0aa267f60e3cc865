// Package poll waits for a condition in Diskplane's end-to-end tests
// (tests/e2e and tests/e2e/install): a cluster converges on its own time, so
// a test checks again every second until the state it wants shows up, and a
// timeout says what the state was last, not just that time ran out. It also
// holds the pod conditions both suites wait for.
package poll

import (
	"context"
	"fmt"
	"time"
)

// Until calls check every second until it reports done, fails, or timeout
// passes. check describes the state it saw; the timeout error quotes the
// last description. An error from check ends the wait, unless it came
// because the deadline passed during the call.
func Until(ctx context.Context, timeout time.Duration, check func(context.Context) (done bool, state string, err error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var state string
	for {
		done, s, err := check(ctx)
		if err != nil && ctx.Err() == nil {
			return err
		}
		if done {
			return nil
		}
		if s != "" {
			state = s
		}
		select {
		case <-ctx.Done():
			if state == "" {
				state = "no state reported"
			}
			return fmt.Errorf("timed out after %s; last: %s", timeout, state)
		case <-time.After(time.Second):
		}
	}
}

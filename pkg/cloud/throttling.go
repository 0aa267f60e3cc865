package cloud

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
)

// throttledHold is how long after EC2's last throttling or server-error
// answer the waits keep looking on Config.ThrottledPollGrid. EC2 refills an
// API's bucket at a few requests a second, so a burst that emptied it keeps
// the driver's requests trickling out for tens of seconds after the last
// refusal.
const throttledHold = 30 * time.Second

// throttleClock remembers when EC2 last refused a request of this process
// for exceeding the account's request rate, or failed one on its side with
// a server error (any API). While EC2 throttles, the requests the SDK holds
// back leave at their own moments instead of together; after server errors,
// the SDK's retries do. Either way the waits that follow them fall due too
// far apart to share their reads, and EC2, strained, should get fewer
// calls, not more: the waits' own looks are then aligned to a coarse grid
// (see throttledGrid). It is safe for concurrent use.
type throttleClock struct {
	last atomic.Int64 // Unix nanoseconds of the last strained answer; 0: none
}

// strained records a throttling or server-error answer (code) to operation
// now. The first one after a calm spell is logged: the waits change their
// pace from here on.
func (t *throttleClock) strained(operation, code string, grid time.Duration) {
	now := time.Now()
	if prev := t.last.Swap(now.UnixNano()); prev == 0 || now.Sub(time.Unix(0, prev)) >= throttledHold {
		klog.V(2).InfoS("EC2 is throttling or failing requests; waits look less often until it stops", "operation", operation,
			"code", code, "pollGrid", grid, "until", throttledHold.String()+" after the last such answer")
	}
}

// recent reports whether EC2 throttled or failed a request less than
// throttledHold before now.
func (t *throttleClock) recent(now time.Time) bool {
	last := t.last.Load()
	return last != 0 && now.Sub(time.Unix(0, last)) < throttledHold
}

// throttledGrid is, while EC2 throttles or fails requests (see
// throttleClock), the grid the waits' looks are aligned to
// (ThrottledPollGrid), and zero otherwise. Requests the SDK holds back or
// retries then leave one by one, and the waits after them fall due too far
// apart to share their calls within their windows; on the coarse grid they
// gather into fewer Describe calls, sparing the account's request budget
// and a strained EC2, at the cost of up to one coarse step of latency per
// wait.
func (c *ec2Cloud) throttledGrid() time.Duration {
	if c.throttles.recent(time.Now()) {
		return c.cfg.ThrottledPollGrid
	}
	return 0
}

// awaitLookupTick holds the lookup a request begins with (not a wait's look)
// until the next tick of ThrottledPollGrid while EC2 throttles or fails
// requests (see throttleClock), and returns
// at once otherwise. The SDK lets throttled requests out one by one, so the
// requests after them reach their first lookups apart, and each such lookup
// took a Describe call of its own; held to the tick the waits look on, they
// share one with each other and with those looks. Only the first lookup of
// a cloud-layer call is held: those that follow it right away stay together
// with the lookups of the calls held to the same tick. A CSI request that
// makes two such calls in a row (a clone reads its source, then creates) is
// held at each, up to two ticks. It fails only when ctx ends first.
func (c *ec2Cloud) awaitLookupTick(ctx context.Context) error {
	now := time.Now()
	if !c.throttles.recent(now) {
		return nil
	}
	if err := sleepUntil(ctx, alignUp(now, c.cfg.ThrottledPollGrid)); err != nil {
		return fmt.Errorf("waiting to look up with the others while EC2 throttles: %w", err)
	}
	return nil
}

// Package batcher merges many concurrent single-key lookups into few bulk
// calls. The cloud layer uses it for EC2's Describe* APIs: a hundred
// goroutines each asking "what state is vol-X in?" become one DescribeVolumes
// call with a hundred IDs, which keeps the controller far below EC2's request
// rate limits when many volumes are attached or resized at once.
//
// Contract:
//   - Keys are collected for at most MaxDelay after the first one arrives, or
//     until MaxEntries distinct keys are waiting, whichever comes first (the
//     keys of one GetMany arrive together, in one step); then
//     one exec call looks all of them up. With IdleDelay set, a batch also
//     starts IdleDelay after its first key whenever no exec call of the
//     batcher is running, and as soon as the last running one ends: keys
//     then wait only for the call before theirs, so a lone lookup costs no
//     delay worth the name while a busy batcher still sends one call per
//     round trip. Callers that ask for the same key
//     in the same batch share one lookup and receive the same value.
//   - A key the exec call returns no result for gets an error wrapping
//     ErrNotFound; an exec call may also return an error for one key alone.
//   - A whole-call error that Options.SplitOnError attributes to a key (EC2
//     fails all of DescribeVolumes when one ID is unknown) is never handed to
//     everybody: the batch is halved and each half retried, down to single
//     keys, so only the bad key's callers see the error. Other whole-call
//     errors (throttling, network) go to every caller of that batch.
//   - A request that arrives while a batch for its key is already running
//     joins the next batch, so an answer never predates the question (a
//     caller polling for "attached" after AttachVolume never gets a reply
//     from a call that started before).
//   - A caller whose context ends stops waiting at once; the batch still runs
//     for everyone else. A key whose callers have all left before its batch
//     starts is not looked up.
//   - Close stops the batcher: waiting callers get ErrClosed or the
//     cancellation of the running call, and no goroutine outlives Close.
package batcher

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// ErrNotFound is wrapped by the error a caller gets when the exec call
// returned no result for its key; the cloud layer maps it to its own
// not-found error.
var ErrNotFound = errors.New("not found in batched lookup")

// ErrClosed is returned to callers of a batcher that has been closed.
var ErrClosed = errors.New("batcher is closed")

// Result is the outcome of looking up one key: a value or an error that
// belongs to that key alone.
type Result[V any] struct {
	// Value is the key's value; it is meaningful only when Err is nil.
	Value V
	// Err is an error for this key alone (for example the cloud's not-found
	// error); the other keys of the batch are unaffected.
	Err error
}

// ExecFunc looks up a batch of distinct keys in one call. It returns a result
// per key it has an answer for (keys it omits get ErrNotFound), or an error
// when the whole call failed. It must honour ctx, which ends at
// Options.ExecTimeout or when the batcher is closed.
type ExecFunc[K comparable, V any] func(ctx context.Context, keys []K) (map[K]Result[V], error)

// Options bound a batcher's batches.
type Options struct {
	// Name identifies the batcher in logs (e.g. "DescribeVolumes").
	Name string
	// MaxEntries is the most distinct keys one exec call receives; the API's
	// page limit is a good value. It must be at least 1.
	MaxEntries int
	// MaxDelay is the longest a caller waits for its batch to start; it is
	// the latency every caller pays in exchange for fewer calls. It must be
	// positive.
	MaxDelay time.Duration
	// IdleDelay, when positive, is how long a batch gathers keys while no
	// exec call runs (callers that ask at the same moment, such as pollers
	// woken by one tick, share it); while calls run, a batch starts when the
	// last of them ends. Zero makes every batch wait MaxDelay. It must not
	// exceed MaxDelay.
	IdleDelay time.Duration
	// ExecTimeout bounds one batch, including the retries of split halves;
	// zero means no bound other than Close. Callers' own contexts do not
	// bound the batch, because it also serves other callers.
	ExecTimeout time.Duration
	// SplitOnError reports whether a whole-call error may have been caused
	// by one of the keys rather than by the call (for EC2: InvalidVolume.NotFound,
	// InvalidInstanceID.Malformed and the like). When it returns true for a
	// batch of more than one key, the batch is halved and both halves are
	// retried, so one bad key costs about 2·log2(n) extra calls instead of
	// failing n callers. Nil means no error is ever split.
	SplitOnError func(error) bool
}

// request is one caller's ask for one key.
type request[K comparable, V any] struct {
	ctx   context.Context
	key   K
	reply chan Result[V] // buffered (1): a reply never blocks the batch
}

// batch is the set of requests that one exec call serves.
type batch[K comparable, V any] struct {
	keys    []K // distinct, in order of first arrival
	waiters map[K][]request[K, V]
}

// startTimer starts a one-shot timer; it returns the channel that fires and a
// function that stops it. Tests replace it with a manual clock.
type startTimer func(d time.Duration) (fired <-chan time.Time, stop func())

// Batcher merges concurrent single-key lookups into bulk exec calls; see the
// package documentation for its contract. It is safe for concurrent use.
type Batcher[K comparable, V any] struct {
	opts       Options
	exec       ExecFunc[K, V]
	startTimer startTimer

	requests  chan []request[K, V] // one caller's keys, which join batches together
	finished  chan struct{}        // an exec call ended (read by the owner)
	closing   chan struct{}        // closed by Close: stop accepting requests
	ownerDone chan struct{}        // closed when the owner goroutine has returned
	closeOnce sync.Once

	execCtx    context.Context // parent of every exec call; cancelled by Close
	cancelExec context.CancelFunc
	running    sync.WaitGroup // exec goroutines
}

// New starts a batcher that serves lookups with exec. Call Close when done
// with it.
func New[K comparable, V any](exec ExecFunc[K, V], opts Options) (*Batcher[K, V], error) {
	return newBatcher(exec, opts, func(d time.Duration) (<-chan time.Time, func()) {
		t := time.NewTimer(d)
		return t.C, func() { t.Stop() }
	})
}

func newBatcher[K comparable, V any](exec ExecFunc[K, V], opts Options, st startTimer) (*Batcher[K, V], error) {
	if exec == nil {
		return nil, fmt.Errorf("batcher %q: exec func is required", opts.Name)
	}
	if opts.MaxEntries < 1 {
		return nil, fmt.Errorf("batcher %q: MaxEntries %d must be at least 1", opts.Name, opts.MaxEntries)
	}
	if opts.MaxDelay <= 0 {
		return nil, fmt.Errorf("batcher %q: MaxDelay %v must be positive", opts.Name, opts.MaxDelay)
	}
	if opts.ExecTimeout < 0 {
		return nil, fmt.Errorf("batcher %q: ExecTimeout %v must not be negative", opts.Name, opts.ExecTimeout)
	}
	if opts.IdleDelay < 0 || opts.IdleDelay > opts.MaxDelay {
		return nil, fmt.Errorf("batcher %q: IdleDelay %v must be between 0 and MaxDelay %v", opts.Name, opts.IdleDelay, opts.MaxDelay)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &Batcher[K, V]{
		opts:       opts,
		exec:       exec,
		startTimer: st,
		requests:   make(chan []request[K, V]),
		finished:   make(chan struct{}),
		closing:    make(chan struct{}),
		ownerDone:  make(chan struct{}),
		execCtx:    ctx,
		cancelExec: cancel,
	}
	go b.own()
	return b, nil
}

// Get returns the value for key, looked up together with the other keys
// asked for at about the same time. It returns early with ctx's error when
// ctx ends first. Callers that share a key share the returned value, so a
// pointer value must be treated as read-only.
func (b *Batcher[K, V]) Get(ctx context.Context, key K) (V, error) {
	return b.submit(ctx, []K{key})[0]()
}

// GetMany looks up every key of keys as if each had a caller of its own
// asking at the same moment: the keys reach the pending batch together, in
// one step however slowly the machine runs, so n distinct keys cost
// n/MaxEntries exec calls (rounded up, plus one when a pending batch had
// room for only some of them) instead of n. It returns a result
// per distinct key (a key the exec call had no answer for carries an error
// wrapping ErrNotFound); a whole-call error reaches the keys of that batch
// only. When ctx ends first, it returns ctx's error.
func (b *Batcher[K, V]) GetMany(ctx context.Context, keys []K) (map[K]Result[V], error) {
	seen := make(map[K]bool, len(keys))
	order := make([]K, 0, len(keys))
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			order = append(order, k)
		}
	}
	waits := b.submit(ctx, order)
	out := make(map[K]Result[V], len(order))
	for i, k := range order {
		v, err := waits[i]()
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, ctxErr
		}
		out[k] = Result[V]{Value: v, Err: err}
	}
	return out, nil
}

// submit hands the requests for keys to the owner goroutine in one message,
// so that no batch timer fires between them, and returns the functions that
// wait for their results, in the order of keys. When submit returns, the
// owner holds the requests, which lets tests order requests against timer
// ticks.
func (b *Batcher[K, V]) submit(ctx context.Context, keys []K) []func() (V, error) {
	rs := make([]request[K, V], len(keys))
	for i, k := range keys {
		rs[i] = request[K, V]{ctx: ctx, key: k, reply: make(chan Result[V], 1)}
	}
	waits := make([]func() (V, error), len(keys))
	fail := func(err error) []func() (V, error) {
		for i := range waits {
			waits[i] = func() (V, error) { var zero V; return zero, err }
		}
		return waits
	}
	select {
	case b.requests <- rs:
	case <-b.closing:
		return fail(ErrClosed)
	case <-ctx.Done():
		return fail(ctx.Err())
	}
	for i, r := range rs {
		waits[i] = func() (V, error) {
			select {
			case res := <-r.reply:
				return res.Value, res.Err
			case <-ctx.Done():
				var zero V
				return zero, ctx.Err()
			}
		}
	}
	return waits
}

// Close stops the batcher: callers still waiting for a batch to start get
// ErrClosed, running exec calls see their context cancelled, and Close
// returns once every goroutine the batcher started has ended. It is safe to
// call more than once.
func (b *Batcher[K, V]) Close() {
	b.closeOnce.Do(func() { close(b.closing) })
	<-b.ownerDone
	b.cancelExec()
	b.running.Wait()
}

// own is the owner goroutine: it alone touches the pending batch.
func (b *Batcher[K, V]) own() {
	defer close(b.ownerDone)
	var (
		pending   *batch[K, V]
		timerC    <-chan time.Time
		stopTimer func()
		short     bool // the pending batch's timer is IdleDelay's
		running   int  // exec calls under way
	)
	idle := func() bool { return b.opts.IdleDelay > 0 && running == 0 }
	startTimer := func() {
		d := b.opts.MaxDelay
		if short = idle(); short {
			d = b.opts.IdleDelay
		}
		timerC, stopTimer = b.startTimer(d)
	}
	flush := func() {
		stopTimer()
		if b.dispatch(pending) {
			running++
		}
		pending, timerC, stopTimer = nil, nil, nil
	}
	for {
		select {
		case <-b.finished:
			running--
			if pending != nil && !short && idle() {
				// The call the batch waited behind has ended.
				stopTimer()
				startTimer()
			}
		case rs := <-b.requests:
			for _, r := range rs {
				if pending == nil {
					pending = &batch[K, V]{waiters: make(map[K][]request[K, V])}
					startTimer()
				}
				if _, seen := pending.waiters[r.key]; !seen {
					pending.keys = append(pending.keys, r.key)
				}
				pending.waiters[r.key] = append(pending.waiters[r.key], r)
				if len(pending.keys) >= b.opts.MaxEntries {
					flush()
				}
			}
		case <-timerC:
			flush()
		case <-b.closing:
			if pending != nil {
				stopTimer()
				pending.deliverAll(pending.keys, Result[V]{Err: ErrClosed})
			}
			return
		}
	}
}

// dispatch starts the exec call for a batch, leaving out keys whose callers
// have all stopped waiting; it reports whether it started one. The call
// tells the owner on b.finished when it ends.
func (b *Batcher[K, V]) dispatch(p *batch[K, V]) bool {
	live := p.keys[:0]
	for _, k := range p.keys {
		for _, r := range p.waiters[k] {
			if r.ctx.Err() == nil {
				live = append(live, k)
				break
			}
		}
	}
	if len(live) == 0 {
		return false
	}
	p.keys = live
	b.running.Add(1)
	go func() {
		defer b.running.Done()
		defer func() {
			select {
			case b.finished <- struct{}{}:
			case <-b.ownerDone:
			}
		}()
		ctx, cancel := b.execCtx, context.CancelFunc(func() {})
		if b.opts.ExecTimeout > 0 {
			ctx, cancel = context.WithTimeout(ctx, b.opts.ExecTimeout)
		}
		defer cancel()
		b.lookUp(ctx, p, p.keys)
	}()
	return true
}

// lookUp runs exec for keys and delivers the results, halving the keys when
// a whole-call error may be one key's fault.
func (b *Batcher[K, V]) lookUp(ctx context.Context, p *batch[K, V], keys []K) {
	klog.V(4).InfoS("Running batched lookup", "batcher", b.opts.Name, "keys", len(keys))
	results, err := b.exec(ctx, keys)
	if err != nil {
		if len(keys) > 1 && ctx.Err() == nil && b.opts.SplitOnError != nil && b.opts.SplitOnError(err) {
			klog.V(4).InfoS("Batched lookup failed because of a key; splitting the batch",
				"batcher", b.opts.Name, "keys", len(keys), "err", err)
			half := len(keys) / 2
			b.lookUp(ctx, p, keys[:half])
			b.lookUp(ctx, p, keys[half:])
			return
		}
		p.deliverAll(keys, Result[V]{Err: err})
		return
	}
	for _, k := range keys {
		res, ok := results[k]
		if !ok {
			res = Result[V]{Err: fmt.Errorf("%v: %w", k, ErrNotFound)}
		}
		p.deliver(k, res)
	}
}

// deliver hands res to every caller waiting for key.
func (p *batch[K, V]) deliver(key K, res Result[V]) {
	for _, r := range p.waiters[key] {
		r.reply <- res
	}
}

// deliverAll hands the same result to every caller of keys.
func (p *batch[K, V]) deliverAll(keys []K, res Result[V]) {
	for _, k := range keys {
		p.deliver(k, res)
	}
}

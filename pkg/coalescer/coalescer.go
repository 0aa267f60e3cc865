// Package coalescer merges requests for the same key that arrive within a
// short window into one execution. The controller uses it so that a
// ControllerExpandVolume and a ControllerModifyVolume for the same volume,
// which Kubernetes sends separately, become a single EC2 ModifyVolume: EC2
// modifies a volume at most four times in 24 hours and only once its previous
// modification has completed, so a second call would leave the second change
// waiting, and spend another of the four.
//
// Contract:
//   - The first request for a key opens a window of Options.Window. Every
//     request for that key arriving before the window ends is folded into
//     the pending input by the MergeFunc. When the window ends, the ExecFunc
//     runs once with the merged input and every merged caller receives the
//     same result.
//   - A MergeFunc error rejects only the incoming request: its caller gets
//     that error at once, and the window goes on with the inputs merged so
//     far.
//   - Executions for one key never overlap. A request arriving while the
//     key's execution runs opens the next window; that window's execution
//     starts when both the window has ended and the running one has
//     returned. Different keys run independently.
//   - A caller whose context ends stops waiting; its input, once merged,
//     stays part of the execution, which still runs for the others.
//   - Close stops the coalescer: callers of windows that have not run get
//     ErrClosed, running executions see their context cancelled, and no
//     goroutine outlives Close.
package coalescer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// ErrClosed is returned to callers of a coalescer that has been closed.
var ErrClosed = errors.New("coalescer is closed")

// MergeFunc folds an incoming input into the input merged so far for the
// same key and returns the new merged input, or an error when the two
// conflict (say, two different target sizes). It runs on the coalescer's
// single owner goroutine, so it must be quick and must not block; it must
// not modify merged or incoming in place if callers still hold them.
type MergeFunc[In any] func(merged, incoming In) (In, error)

// ExecFunc carries out the merged input for key. It must honour ctx, which
// ends at Options.ExecTimeout or when the coalescer is closed.
type ExecFunc[K comparable, In, Out any] func(ctx context.Context, key K, in In) (Out, error)

// Options configure a coalescer.
type Options struct {
	// Name identifies the coalescer in logs (e.g. "ModifyVolume").
	Name string
	// Window is how long the first request for a key waits for others to
	// join it; it is the latency every request pays. It must be positive.
	Window time.Duration
	// ExecTimeout bounds one execution; zero means no bound other than
	// Close. Callers' own contexts do not bound it, because it also serves
	// other callers.
	ExecTimeout time.Duration
}

// result is what every caller of one execution receives.
type result[Out any] struct {
	out Out
	err error
}

type request[K comparable, In, Out any] struct {
	key   K
	in    In
	reply chan result[Out] // buffered (1): a reply never blocks the owner
}

// window is the pending, merged input for one key.
type window[K comparable, In, Out any] struct {
	key     K
	in      In
	waiters []chan result[Out]
	ended   bool   // the window's time is up; it runs when the key is idle
	stop    func() // stops the window's timer
}

// keyState is what the owner knows about one key with work pending or running.
type keyState[K comparable, In, Out any] struct {
	open    *window[K, In, Out] // collecting, or ended and waiting for running to finish
	running bool
}

// afterFunc calls f once d has passed and returns a function that cancels
// the call. Tests replace it with a manual clock.
type afterFunc func(d time.Duration, f func()) (stop func())

// Coalescer merges requests per key within a window and executes each merged
// request once; see the package documentation for its contract. It is safe
// for concurrent use.
type Coalescer[K comparable, In, Out any] struct {
	opts      Options
	merge     MergeFunc[In]
	exec      ExecFunc[K, In, Out]
	afterFunc afterFunc

	requests  chan request[K, In, Out]
	ended     chan *window[K, In, Out] // a window's timer fired
	finished  chan K                   // a key's execution returned
	closing   chan struct{}            // closed by Close
	ownerDone chan struct{}            // closed when the owner goroutine has returned
	closeOnce sync.Once

	execCtx    context.Context // parent of every execution; cancelled by Close
	cancelExec context.CancelFunc
	running    sync.WaitGroup // execution goroutines
}

// New starts a coalescer that merges inputs with merge and carries them out
// with exec. Call Close when done with it.
func New[K comparable, In, Out any](merge MergeFunc[In], exec ExecFunc[K, In, Out], opts Options) (*Coalescer[K, In, Out], error) {
	return newCoalescer(merge, exec, opts, func(d time.Duration, f func()) func() {
		t := time.AfterFunc(d, f)
		return func() { t.Stop() }
	})
}

func newCoalescer[K comparable, In, Out any](merge MergeFunc[In], exec ExecFunc[K, In, Out], opts Options, af afterFunc) (*Coalescer[K, In, Out], error) {
	if merge == nil || exec == nil {
		return nil, fmt.Errorf("coalescer %q: merge and exec funcs are required", opts.Name)
	}
	if opts.Window <= 0 {
		return nil, fmt.Errorf("coalescer %q: Window %v must be positive", opts.Name, opts.Window)
	}
	if opts.ExecTimeout < 0 {
		return nil, fmt.Errorf("coalescer %q: ExecTimeout %v must not be negative", opts.Name, opts.ExecTimeout)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Coalescer[K, In, Out]{
		opts:       opts,
		merge:      merge,
		exec:       exec,
		afterFunc:  af,
		requests:   make(chan request[K, In, Out]),
		ended:      make(chan *window[K, In, Out]),
		finished:   make(chan K),
		closing:    make(chan struct{}),
		ownerDone:  make(chan struct{}),
		execCtx:    ctx,
		cancelExec: cancel,
	}
	go c.own()
	return c, nil
}

// Do submits in for key and returns the result of the execution it was
// merged into, the merge error when it conflicts with what is pending, or
// ctx's error when ctx ends first.
func (c *Coalescer[K, In, Out]) Do(ctx context.Context, key K, in In) (Out, error) {
	return c.submit(ctx, key, in)()
}

// submit hands the request to the owner goroutine and returns the function
// that waits for its result. When submit returns, the owner holds the
// request, which lets tests order requests against timer ticks.
func (c *Coalescer[K, In, Out]) submit(ctx context.Context, key K, in In) func() (Out, error) {
	r := request[K, In, Out]{key: key, in: in, reply: make(chan result[Out], 1)}
	fail := func(err error) func() (Out, error) {
		return func() (Out, error) {
			var zero Out
			return zero, err
		}
	}
	select {
	case c.requests <- r:
	case <-c.closing:
		return fail(ErrClosed)
	case <-ctx.Done():
		return fail(ctx.Err())
	}
	return func() (Out, error) {
		select {
		case res := <-r.reply:
			return res.out, res.err
		case <-ctx.Done():
			var zero Out
			return zero, ctx.Err()
		}
	}
}

// Close stops the coalescer: callers of windows that have not run get
// ErrClosed, running executions see their context cancelled, and Close
// returns once every goroutine the coalescer started has ended. It is safe
// to call more than once.
func (c *Coalescer[K, In, Out]) Close() {
	c.closeOnce.Do(func() { close(c.closing) })
	<-c.ownerDone
	c.cancelExec()
	c.running.Wait()
}

// own is the owner goroutine: it alone touches the per-key state.
func (c *Coalescer[K, In, Out]) own() {
	defer close(c.ownerDone)
	keys := make(map[K]*keyState[K, In, Out])
	for {
		select {
		case r := <-c.requests:
			c.accept(keys, r)
		case w := <-c.ended:
			// A window ends only through its own timer, so it is still its
			// key's open window here.
			w.ended = true
			if st := keys[w.key]; !st.running {
				c.launch(st)
			}
		case k := <-c.finished:
			st := keys[k]
			st.running = false
			switch {
			case st.open == nil:
				delete(keys, k)
			case st.open.ended:
				c.launch(st)
			}
		case <-c.closing:
			for _, st := range keys {
				if w := st.open; w != nil {
					w.stop()
					for _, reply := range w.waiters {
						reply <- result[Out]{err: ErrClosed}
					}
				}
			}
			return
		}
	}
}

// accept merges a request into its key's open window, or opens one.
func (c *Coalescer[K, In, Out]) accept(keys map[K]*keyState[K, In, Out], r request[K, In, Out]) {
	st := keys[r.key]
	if st == nil {
		st = &keyState[K, In, Out]{}
		keys[r.key] = st
	}
	if w := st.open; w != nil {
		merged, err := c.merge(w.in, r.in)
		if err != nil {
			klog.V(4).InfoS("Rejected a request that conflicts with a pending one",
				"coalescer", c.opts.Name, "key", r.key, "err", err)
			r.reply <- result[Out]{err: err}
			return
		}
		w.in = merged
		w.waiters = append(w.waiters, r.reply)
		klog.V(4).InfoS("Merged a request into a pending one", "coalescer", c.opts.Name,
			"key", r.key, "callers", len(w.waiters))
		return
	}
	w := &window[K, In, Out]{key: r.key, in: r.in, waiters: []chan result[Out]{r.reply}}
	w.stop = c.afterFunc(c.opts.Window, func() {
		select {
		case c.ended <- w:
		case <-c.ownerDone:
		}
	})
	st.open = w
}

// launch starts the execution of the key's ended window.
func (c *Coalescer[K, In, Out]) launch(st *keyState[K, In, Out]) {
	w := st.open
	st.open, st.running = nil, true
	klog.V(4).InfoS("Executing coalesced request", "coalescer", c.opts.Name, "key", w.key,
		"callers", len(w.waiters))
	c.running.Add(1)
	go func() {
		defer c.running.Done()
		ctx, cancel := c.execCtx, context.CancelFunc(func() {})
		if c.opts.ExecTimeout > 0 {
			ctx, cancel = context.WithTimeout(ctx, c.opts.ExecTimeout)
		}
		out, err := c.exec(ctx, w.key, w.in)
		cancel()
		for _, reply := range w.waiters {
			reply <- result[Out]{out: out, err: err}
		}
		select {
		case c.finished <- w.key:
		case <-c.ownerDone:
		}
	}()
}

package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/klog/v2"
)

// Class is how EC2 throttles an action.
type Class int

// The throttling classes.
const (
	// Mutating actions change state.
	Mutating Class = iota
	// Describe actions read state, narrowed by IDs, filters or paging.
	Describe
	// UnfilteredDescribe actions read everything in one go.
	UnfilteredDescribe
)

// Injected is a fault that answers a request instead of the cloud.
type Injected struct {
	Code    string
	Message string
}

// Error renders the code and message.
func (i *Injected) Error() string { return i.Code + ": " + i.Message }

// Faults holds the current setting and its run-time state (token buckets,
// remaining counts, the random source). It is safe for concurrent use.
type Faults struct {
	mu      sync.Mutex
	cfg     Config
	buckets map[string]*rate.Limiter
	rnd     *rand.Rand
	now     func() time.Time
}

// New returns faults set to cfg.
func New(cfg Config) (*Faults, error) {
	f := &Faults{now: time.Now}
	if err := f.Set(cfg); err != nil {
		return nil, err
	}
	return f, nil
}

// Config returns a copy of the current setting, with remaining counts as
// they are now.
func (f *Faults) Config() Config {
	f.mu.Lock()
	defer f.mu.Unlock()
	return cloneConfig(f.cfg)
}

// Set replaces the whole setting; token buckets start full again.
func (f *Faults) Set(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cfg = cloneConfig(cfg)
	f.buckets = map[string]*rate.Limiter{}
	f.rnd = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	klog.V(2).InfoS("Fault setting changed", "faults", describe(f.cfg))
	return nil
}

// Patch applies a JSON document onto the current setting: fields it names
// replace the current ones, fields it leaves out stay.
func (f *Faults) Patch(doc []byte) error {
	cfg := f.Config()
	if err := json.Unmarshal(doc, &cfg); err != nil {
		return fmt.Errorf("fault setting: %w", err)
	}
	return f.Set(cfg)
}

// Before runs the faults for one request of action in class, in the order a
// client would meet them on EC2: the added latency (cut short when ctx
// ends), then authorization, throttling and injected errors. A non-nil
// result is the error to answer instead of handling the request.
func (f *Faults) Before(ctx context.Context, action string, class Class) *Injected {
	f.mu.Lock()
	delay, ok := f.cfg.Latency[action]
	if !ok {
		delay = f.cfg.Latency["*"]
	}
	f.mu.Unlock()
	if delay > 0 {
		t := time.NewTimer(time.Duration(delay))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	if slices.Contains(f.cfg.Unsupported, action) {
		return &Injected{Code: "InvalidAction", Message: fmt.Sprintf("The action %s is not valid for this web service.", action)}
	}
	if slices.Contains(f.cfg.Unauthorized, action) || slices.Contains(f.cfg.Unauthorized, "*") {
		return &Injected{Code: "UnauthorizedOperation", Message: fmt.Sprintf("You are not authorized to perform this operation. Action: ec2:%s", action)}
	}
	if f.cfg.Throttle.Enabled && !f.bucket(action, class).AllowN(f.now(), 1) {
		return &Injected{Code: "RequestLimitExceeded", Message: "Request limit exceeded."}
	}
	for i := range f.cfg.Errors {
		r := &f.cfg.Errors[i]
		if (r.Action != action && r.Action != "*") || f.rnd.Float64() >= r.Probability {
			continue
		}
		code := r.Code
		if spend(&r.Count) {
			f.cfg.Errors = slices.Delete(f.cfg.Errors, i, i+1)
		}
		klog.V(2).InfoS("Fault: injecting an error", "action", action, "code", code)
		return &Injected{Code: code, Message: ErrorMessage(code)}
	}
	return nil
}

// bucket returns the token bucket of an action, creating it full.
func (f *Faults) bucket(action string, class Class) *rate.Limiter {
	key := fmt.Sprintf("%d/%s", class, action)
	if l := f.buckets[key]; l != nil {
		return l
	}
	var b Bucket
	switch class {
	case Mutating:
		b = f.cfg.Throttle.Mutating
	case UnfilteredDescribe:
		b = f.cfg.Throttle.UnfilteredDescribe
	default:
		b = f.cfg.Throttle.Describe
	}
	l := rate.NewLimiter(rate.Limit(b.RefillPerSecond), b.Size)
	f.buckets[key] = l
	return l
}

// ErrorMessage is EC2's message for an injectable error code.
func ErrorMessage(code string) string {
	if code == CodeUnavailable {
		return "The server is overloaded and can't handle the request."
	}
	return "An internal error has occurred."
}

// Hide is how long new resources stay out of Describe* answers.
func (f *Faults) Hide() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return time.Duration(f.cfg.EventualConsistency)
}

// StickAttach reports whether a new attachment of volumeID should stay in
// "attaching"; each positive answer from the Next count uses one up.
func (f *Faults) StickAttach(volumeID string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if slices.Contains(f.cfg.StuckAttach.VolumeIDs, volumeID) {
		return true
	}
	if f.cfg.StuckAttach.Next > 0 {
		f.cfg.StuckAttach.Next--
		return true
	}
	return false
}

// cloneConfig deep-copies a setting.
func cloneConfig(c Config) Config {
	out := c
	out.Latency = maps.Clone(c.Latency)
	out.Errors = slices.Clone(c.Errors)
	out.Unauthorized = slices.Clone(c.Unauthorized)
	out.Unsupported = slices.Clone(c.Unsupported)
	out.StuckAttach.VolumeIDs = slices.Clone(c.StuckAttach.VolumeIDs)
	out.CommitThenFail = slices.Clone(c.CommitThenFail)
	out.AsyncFailures = slices.Clone(c.AsyncFailures)
	out.UnusableKMSKeys = slices.Clone(c.UnusableKMSKeys)
	return out
}

// describe renders a setting for the log.
func describe(c Config) string {
	b, err := json.Marshal(c)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// Package faults injects the misbehaviour of a real cloud into the EC2
// emulator, so that a driver's retries, backoff, waiting and idempotency
// can be tested: added latency per action, EC2-style throttling (a token
// bucket per action, sized by action class, answering RequestLimitExceeded),
// injected InternalError / Unavailable answers, requests that are applied
// and then fail (commit, then fail), eventual consistency (new resources
// missing from Describe* for a while) and stale reads (Describe* answering
// from the recent past), UnauthorizedOperation for chosen actions,
// attachments stuck in "attaching", volumes and snapshots that fail after
// they were accepted, and a clock that runs ahead of or behind the host's.
//
// Everything is set from flags at start and can be read and changed at run
// time as JSON through the emulator's admin listener.
package faults

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// Duration is a time.Duration that reads and writes JSON as a Go duration
// string ("1.5s"), so fault settings stay readable in curl and config files.
type Duration time.Duration

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string, or a number of nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n int64
		if err := json.Unmarshal(b, &n); err != nil {
			return fmt.Errorf("duration: want a string like \"1.5s\": %w", err)
		}
		*d = Duration(n)
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	*d = Duration(v)
	return nil
}

// Config is the complete fault setting. The zero value injects nothing.
type Config struct {
	// Latency adds a delay before an action is handled, by action name;
	// the key "*" applies to every action without its own entry.
	Latency map[string]Duration `json:"latency,omitempty"`
	// Throttle enables EC2-style request throttling.
	Throttle Throttle `json:"throttle"`
	// Errors inject failures; the first matching rule that fires wins.
	Errors []ErrorRule `json:"errors,omitempty"`
	// Unauthorized lists actions that answer UnauthorizedOperation, as an
	// IAM policy without them would ("*" for every action).
	Unauthorized []string `json:"unauthorized,omitempty"`
	// Unsupported lists actions that answer InvalidAction, as EC2 answers
	// an action it does not know: an EC2-API cloud without a newer action
	// (DescribeVolumeStatus, CopyVolumes …).
	Unsupported []string `json:"unsupported,omitempty"`
	// EventualConsistency hides resources younger than this from Describe*
	// calls (and only from them), like EC2's eventually consistent reads.
	EventualConsistency Duration `json:"eventualConsistency,omitempty"`
	// StuckAttach keeps new attachments in "attaching".
	StuckAttach StuckAttach `json:"stuckAttach"`
	// CommitThenFail applies matching requests and then fails them, as a
	// lost answer does: the change is made, the client cannot know it.
	CommitThenFail []CommitFailRule `json:"commitThenFail,omitempty"`
	// StaleReads makes Describe* calls answer from the recent past, for
	// everything they report (attachments, tags, modifications, states).
	StaleReads StaleReads `json:"staleReads"`
	// AsyncFailures make new volumes or snapshots fail after the request
	// that made them succeeded.
	AsyncFailures []AsyncFailureRule `json:"asyncFailures,omitempty"`
	// UnusableKMSKeys are KMS key IDs the account may name but not use:
	// a volume encrypted with one goes creating → error and disappears,
	// as when the role lacks permission on the key.
	UnusableKMSKeys []string `json:"unusableKmsKeys,omitempty"`
	// ClockSkew moves the emulated cloud's clock ahead of (positive) or
	// behind (negative) the host's, for every timestamp it reports.
	ClockSkew Duration `json:"clockSkew,omitempty"`
	// Seed makes the random draws of error injection reproducible; 0 seeds
	// from the clock.
	Seed uint64 `json:"seed,omitempty"`
}

// Throttle configures the token buckets. EC2 keeps a bucket per action; its
// size and refill rate depend on the action's class.
type Throttle struct {
	Enabled bool `json:"enabled"`
	// Mutating is the bucket of each mutating action (Create*, Delete*,
	// Attach*, Detach*, Modify*, Copy*).
	Mutating Bucket `json:"mutating"`
	// Describe is the bucket of each non-mutating action.
	Describe Bucket `json:"describe"`
	// UnfilteredDescribe is the bucket for Describe* calls with neither IDs,
	// filters nor MaxResults, which EC2 throttles harder.
	UnfilteredDescribe Bucket `json:"unfilteredDescribe"`
}

// Bucket is one token bucket: Size requests at once, refilled at
// RefillPerSecond tokens a second.
type Bucket struct {
	Size            int     `json:"size"`
	RefillPerSecond float64 `json:"refillPerSecond"`
}

// EC2Throttle returns EC2's documented default bucket sizes and refill rates
// for an account: mutating 200 / 5 per second, non-mutating 100 / 20,
// unfiltered and unpaginated non-mutating 50 / 10.
func EC2Throttle() Throttle {
	return Throttle{
		Enabled:            true,
		Mutating:           Bucket{Size: 200, RefillPerSecond: 5},
		Describe:           Bucket{Size: 100, RefillPerSecond: 20},
		UnfilteredDescribe: Bucket{Size: 50, RefillPerSecond: 10},
	}
}

// ErrorRule injects an error code into matching requests.
type ErrorRule struct {
	// Action is the action name, or "*" for all.
	Action string `json:"action"`
	// Code is InternalError (HTTP 500) or Unavailable (HTTP 503).
	Code string `json:"code"`
	// Probability of injecting into a matching request, 0 < p <= 1.
	Probability float64 `json:"probability"`
	// Count, when positive, stops the rule after that many injections, so a
	// test can fail exactly the next N calls.
	Count int `json:"count,omitempty"`
}

// StuckAttach keeps attachments in "attaching": those of the listed
// volumes, and the next Next attachments of any volume.
type StuckAttach struct {
	VolumeIDs []string `json:"volumeIds,omitempty"`
	Next      int      `json:"next,omitempty"`
}

// Injectable error codes.
const (
	CodeInternalError = "InternalError"
	CodeUnavailable   = "Unavailable"
)

// How a committed request fails (CommitFailRule.Mode).
const (
	// FailInternalError answers InternalError (HTTP 500).
	FailInternalError = CodeInternalError
	// FailUnavailable answers Unavailable (HTTP 503).
	FailUnavailable = CodeUnavailable
	// FailReset closes the connection without an answer (a TCP reset).
	FailReset = "Reset"
	// FailStall answers nothing until the client gives up (or Stall has
	// passed), then closes the connection.
	FailStall = "Stall"
)

// CommitFailRule applies matching requests and then fails them.
type CommitFailRule struct {
	// Action is the action name, or "*" for every mutating action.
	Action string `json:"action"`
	// Mode is InternalError, Unavailable, Reset or Stall.
	Mode string `json:"mode"`
	// Probability of failing a matching request that succeeded, 0 < p <= 1.
	Probability float64 `json:"probability"`
	// Count, when positive, stops the rule after that many failures.
	Count int `json:"count,omitempty"`
	// Stall bounds how long a Stall holds the request when the client does
	// not give up first; zero means DefaultStall.
	Stall Duration `json:"stall,omitempty"`
}

// DefaultStall is how long a stalled request is held at most: longer than
// any client deadline worth testing, short enough that a server shutdown
// is not held up for long.
const DefaultStall = 2 * time.Minute

// StaleReads makes Describe* answers stale: with Probability, a call sees
// the cloud as it was a random moment up to MaxLag ago.
type StaleReads struct {
	MaxLag      Duration `json:"maxLag,omitempty"`
	Probability float64  `json:"probability,omitempty"`
}

// AsyncFailureRule makes resources that a request created fail later:
// volumes (CreateVolume, CopyVolumes) go creating → error and disappear,
// snapshots (CreateSnapshot) go pending → error.
type AsyncFailureRule struct {
	// Action is CreateVolume, CopyVolumes, CreateSnapshot or "*".
	Action string `json:"action"`
	// Probability of failing a resource the action made, 0 < p <= 1.
	Probability float64 `json:"probability"`
	// Count, when positive, stops the rule after that many failures.
	Count int `json:"count,omitempty"`
}

// asyncActions are the actions whose resources can fail asynchronously.
var asyncActions = []string{"CreateVolume", "CopyVolumes", "CreateSnapshot", "*"}

// Validate checks that every setting makes sense.
func (c Config) Validate() error {
	for a, d := range c.Latency {
		if d < 0 {
			return fmt.Errorf("latency of %s is negative", a)
		}
	}
	if c.Throttle.Enabled {
		for name, b := range map[string]Bucket{"mutating": c.Throttle.Mutating, "describe": c.Throttle.Describe, "unfilteredDescribe": c.Throttle.UnfilteredDescribe} {
			if b.Size <= 0 || b.RefillPerSecond <= 0 {
				return fmt.Errorf("throttle bucket %s needs a positive size and refill rate", name)
			}
		}
	}
	for i, r := range c.Errors {
		if r.Action == "" {
			return fmt.Errorf("error rule %d: no action (use \"*\" for all)", i)
		}
		if r.Code != CodeInternalError && r.Code != CodeUnavailable {
			return fmt.Errorf("error rule %d: code %q: want %s or %s", i, r.Code, CodeInternalError, CodeUnavailable)
		}
		if r.Probability <= 0 || r.Probability > 1 {
			return fmt.Errorf("error rule %d: probability %v: want 0 < p <= 1", i, r.Probability)
		}
		if r.Count < 0 {
			return fmt.Errorf("error rule %d: negative count", i)
		}
	}
	if c.EventualConsistency < 0 {
		return fmt.Errorf("eventual consistency delay is negative")
	}
	if c.StuckAttach.Next < 0 {
		return fmt.Errorf("stuck attach count is negative")
	}
	for i, r := range c.CommitThenFail {
		if r.Action == "" {
			return fmt.Errorf("commit-then-fail rule %d: no action (use \"*\" for all)", i)
		}
		if !slices.Contains([]string{FailInternalError, FailUnavailable, FailReset, FailStall}, r.Mode) {
			return fmt.Errorf("commit-then-fail rule %d: mode %q: want %s, %s, %s or %s", i, r.Mode, FailInternalError, FailUnavailable, FailReset, FailStall)
		}
		if err := checkRate("commit-then-fail", i, r.Probability, r.Count); err != nil {
			return err
		}
		if r.Stall < 0 {
			return fmt.Errorf("commit-then-fail rule %d: negative stall", i)
		}
	}
	if c.StaleReads.MaxLag < 0 || c.StaleReads.Probability < 0 || c.StaleReads.Probability > 1 {
		return fmt.Errorf("stale reads: want a lag of 0 or more and 0 <= probability <= 1")
	}
	if (c.StaleReads.MaxLag > 0) != (c.StaleReads.Probability > 0) {
		return fmt.Errorf("stale reads: give both a lag and a probability, or neither")
	}
	for i, r := range c.AsyncFailures {
		if !slices.Contains(asyncActions, r.Action) {
			return fmt.Errorf("asynchronous failure rule %d: action %q: want one of %v", i, r.Action, asyncActions)
		}
		if err := checkRate("asynchronous failure", i, r.Probability, r.Count); err != nil {
			return err
		}
	}
	return nil
}

// checkRate validates a rule's probability and count.
func checkRate(kind string, i int, p float64, count int) error {
	if p <= 0 || p > 1 {
		return fmt.Errorf("%s rule %d: probability %v: want 0 < p <= 1", kind, i, p)
	}
	if count < 0 {
		return fmt.Errorf("%s rule %d: negative count", kind, i)
	}
	return nil
}

package faults

import (
	"slices"
	"time"

	"k8s.io/klog/v2"
)

// AfterCommit is asked once a mutating request of action has been applied:
// it returns the rule that makes the request fail anyway (see
// CommitFailRule), or nil when the request answers normally.
func (f *Faults) AfterCommit(action string) *CommitFailRule {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.cfg.CommitThenFail {
		r := f.cfg.CommitThenFail[i]
		if (r.Action != action && r.Action != "*") || f.rnd.Float64() >= r.Probability {
			continue
		}
		if spend(&f.cfg.CommitThenFail[i].Count) {
			f.cfg.CommitThenFail = slices.Delete(f.cfg.CommitThenFail, i, i+1)
		}
		if r.Stall == 0 {
			r.Stall = Duration(DefaultStall)
		}
		klog.V(2).InfoS("Fault: the request was applied and will fail", "action", action, "mode", r.Mode)
		return &r
	}
	return nil
}

// FailAsync is asked when a request of action has made a resource (a
// volume encrypted with kmsKeyID, or a snapshot): true means the resource
// fails later instead of becoming usable.
func (f *Faults) FailAsync(action, kmsKeyID string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if kmsKeyID != "" && slices.Contains(f.cfg.UnusableKMSKeys, kmsKeyID) {
		klog.V(2).InfoS("Fault: the KMS key is unusable; the volume will fail", "action", action, "kmsKeyId", kmsKeyID)
		return true
	}
	for i := range f.cfg.AsyncFailures {
		r := f.cfg.AsyncFailures[i]
		if (r.Action != action && r.Action != "*") || f.rnd.Float64() >= r.Probability {
			continue
		}
		if spend(&f.cfg.AsyncFailures[i].Count) {
			f.cfg.AsyncFailures = slices.Delete(f.cfg.AsyncFailures, i, i+1)
		}
		klog.V(2).InfoS("Fault: the new resource will fail", "action", action)
		return true
	}
	return false
}

// spend uses one of a rule's count and reports whether the rule is done; a
// zero count means the rule never runs out.
func spend(count *int) bool {
	if *count <= 0 {
		return false
	}
	*count--
	return *count == 0
}

// ReadLag is how stale one Describe* answer is: zero, or (with the stale
// reads' probability) a random lag up to their MaxLag.
func (f *Faults) ReadLag() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.cfg.StaleReads
	if s.MaxLag <= 0 || f.rnd.Float64() >= s.Probability {
		return 0
	}
	return time.Duration(1 + f.rnd.Int64N(int64(s.MaxLag)))
}

// StaleWindow is how far back a stale read may reach, so the cloud knows
// how much of its past to keep.
func (f *Faults) StaleWindow() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return time.Duration(f.cfg.StaleReads.MaxLag)
}

// Now is the emulated cloud's clock: the host's, moved by the clock skew.
func (f *Faults) Now() time.Time {
	f.mu.Lock()
	skew := time.Duration(f.cfg.ClockSkew)
	f.mu.Unlock()
	return time.Now().Add(skew)
}

package cloud

import (
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
)

// EC2 operations that change something. Each gets a retryer of its own:
// the SDK's adaptive mode slows a retryer down after throttling answers, and
// EC2 limits the request rate of each API separately, so one throttled API
// (say, a burst of CreateVolume) must not slow AttachVolume or the
// Describe calls that every wait depends on.
const (
	opCreateVolume   = "CreateVolume"
	opCopyVolumes    = "CopyVolumes"
	opDeleteVolume   = "DeleteVolume"
	opAttachVolume   = "AttachVolume"
	opDetachVolume   = "DetachVolume"
	opModifyVolume   = "ModifyVolume"
	opCreateSnapshot = "CreateSnapshot"
	opDeleteSnapshot = "DeleteSnapshot"
	opCreateTags     = "CreateTags"
	opDeleteTags     = "DeleteTags"
)

var mutatingOperations = []string{
	opCreateVolume, opCopyVolumes, opDeleteVolume, opAttachVolume, opDetachVolume,
	opModifyVolume, opCreateSnapshot, opDeleteSnapshot, opCreateTags, opDeleteTags,
}

// retryers holds the retry strategies of one Cloud.
type retryers struct {
	// reads serves every Describe call (they share EC2's non-mutating limit).
	reads aws.Retryer
	// mutating has one retryer per mutating operation.
	mutating map[string]aws.Retryer
}

// applyOnceOperations are the mutating operations that neither take a
// ClientToken nor are harmless to repeat: a second CreateSnapshot makes a
// second snapshot, a second ModifyVolume a second modification (one of the
// volume's few a day). Their retryers retry only throttling, which EC2
// answers before doing anything; after any other failure the request may
// have been applied, and the cloud layer looks before it asks again.
var applyOnceOperations = map[string]bool{opCreateSnapshot: true, opModifyVolume: true}

func newRetryers(maxBackoff time.Duration) *retryers {
	r := &retryers{reads: newAdaptiveRetryer(maxBackoff, false), mutating: map[string]aws.Retryer{}}
	for _, op := range mutatingOperations {
		r.mutating[op] = newAdaptiveRetryer(maxBackoff, applyOnceOperations[op])
	}
	return r
}

// serverErrorCodes are EC2's codes for its own failures. The SDK retries
// them by their HTTP status (500, 503) already; naming them keeps them
// retried even when a proxy or an EC2-compatible cloud sends another status.
var serverErrorCodes = map[string]struct{}{
	"InternalError": {}, "InternalFailure": {}, "ServiceUnavailable": {}, "Unavailable": {},
}

// newAdaptiveRetryer returns the SDK's adaptive retry mode with no bound on
// attempts and no retry quota: the caller's context deadline is what ends a
// call that keeps failing (a CSI sidecar gives every call a deadline and
// retries it later), so a throttling burst delays calls instead of failing
// them. Backoff between attempts grows up to maxBackoff. throttlesOnly
// retries nothing but throttling (see applyOnceOperations).
func newAdaptiveRetryer(maxBackoff time.Duration, throttlesOnly bool) aws.Retryer {
	adaptive := retry.NewAdaptiveMode(func(o *retry.AdaptiveModeOptions) {
		o.StandardOptions = append(o.StandardOptions, func(so *retry.StandardOptions) {
			so.MaxBackoff = maxBackoff
			so.RateLimiter = ratelimit.None
			if throttlesOnly {
				so.Retryables = []retry.IsErrorRetryable{retry.RetryableErrorCode{Codes: retry.DefaultThrottleErrorCodes}}
				return
			}
			so.Retryables = append(so.Retryables, retry.RetryableErrorCode{Codes: serverErrorCodes})
		})
	})
	return retry.AddWithMaxAttempts(adaptive, 0)
}

// use returns the call option that makes one EC2 call use op's retryer; a
// Describe or any operation without its own retryer uses the shared one.
func (r *retryers) use(op string) func(*ec2.Options) {
	rt, ok := r.mutating[op]
	if !ok {
		rt = r.reads
	}
	return func(o *ec2.Options) {
		o.Retryer = rt
		o.RetryMaxAttempts = 0
	}
}

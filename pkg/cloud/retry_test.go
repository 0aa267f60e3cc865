package cloud

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/smithy-go"
)

func TestRetryersArePerMutatingOperation(t *testing.T) {
	r := newRetryers(time.Second)
	seen := map[aws.Retryer]string{}
	ops := append([]string{"DescribeVolumes"}, mutatingOperations...)
	for _, op := range ops {
		var o ec2.Options
		o.RetryMaxAttempts = 7
		r.use(op)(&o)
		if o.Retryer == nil {
			t.Fatalf("%s: no retryer set", op)
		}
		if o.RetryMaxAttempts != 0 {
			t.Errorf("%s: RetryMaxAttempts %d would re-impose an attempt bound", op, o.RetryMaxAttempts)
		}
		if other, dup := seen[o.Retryer]; dup {
			t.Errorf("%s shares its retryer with %s", op, other)
		}
		seen[o.Retryer] = op
		if got := o.Retryer.MaxAttempts(); got != 0 {
			t.Errorf("%s: MaxAttempts = %d, want 0 (bounded by the context only)", op, got)
		}
	}
	var a, b ec2.Options
	r.use("DescribeInstances")(&a)
	r.use("DescribeSnapshots")(&b)
	if a.Retryer != b.Retryer {
		t.Error("Describe calls should share one retryer")
	}
}

func TestRetryerRetriesServerAndThrottleErrors(t *testing.T) {
	rt := newRetryers(time.Second).mutating[opCreateVolume]
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"throttled", &smithy.GenericAPIError{Code: "RequestLimitExceeded"}, true},
		{"internal error code", &smithy.GenericAPIError{Code: "InternalError"}, true},
		{"unavailable code", &smithy.GenericAPIError{Code: "Unavailable"}, true},
		{"any 503", sdkError("CreateVolume", 503, "Whatever", ""), true},
		{"bad parameter", sdkError("CreateVolume", 400, "InvalidParameterValue", ""), false},
		{"token mismatch", sdkError("CreateVolume", 400, "IdempotentParameterMismatch", ""), false},
		{"not found", sdkError("CreateVolume", 400, "InvalidVolume.NotFound", ""), false},
	}
	for _, tc := range tests {
		if got := rt.IsErrorRetryable(tc.err); got != tc.want {
			t.Errorf("%s: IsErrorRetryable = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestThrottlingOneOperationDoesNotSlowAnother feeds throttling answers to
// the CreateVolume retryer until its client-side rate limit engages, then
// asks each retryer for a send token with a context that is already done: a
// retryer that would have to wait fails, one that may send at once succeeds.
func TestThrottlingOneOperationDoesNotSlowAnother(t *testing.T) {
	r := newRetryers(time.Second)
	throttled := r.mutating[opCreateVolume].(aws.RetryerV2)
	other := r.mutating[opAttachVolume].(aws.RetryerV2)
	reads := r.reads.(aws.RetryerV2)

	throttle := &smithy.GenericAPIError{Code: "RequestLimitExceeded", Message: "slow down"}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	limited := false
	for range 100 {
		release, err := throttled.GetAttemptToken(done)
		if err != nil {
			limited = true
			break
		}
		if err := release(throttle); err != nil {
			t.Fatal(err)
		}
	}
	if !limited {
		t.Fatal("the adaptive retryer never rate-limited CreateVolume after 100 throttles")
	}
	for name, rt := range map[string]aws.RetryerV2{"AttachVolume": other, "Describe": reads} {
		release, err := rt.GetAttemptToken(done)
		if err != nil {
			t.Errorf("%s was slowed down by CreateVolume's throttling: %v", name, err)
			continue
		}
		if err := release(nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := throttled.GetAttemptToken(done); !errors.Is(err, context.Canceled) {
		t.Errorf("throttled retryer: err = %v, want it to wait (and see the cancelled context)", err)
	}
}

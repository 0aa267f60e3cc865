package cloud

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go/middleware"
)

// sendTimeMiddlewareID names the send-time middleware in the SDK's stack.
const sendTimeMiddlewareID = "diskplane/sendtime"

// attemptSentKey is the result-metadata key under which the send-time
// middleware records when an attempt left.
type attemptSentKey struct{}

// recordSendTimes puts into an SDK client's stack a middleware that records
// in each attempt's result metadata when that attempt was sent. It sits
// after the retry middleware, so it runs once per attempt and after the
// retryer's pacing (adaptive mode holds attempts back after throttling
// answers); the SDK makes the last attempt's metadata the call's. A state
// change begins when EC2 takes the request, so its waits are timed from
// this moment, not from the SDK call, which may have begun seconds earlier.
func recordSendTimes(stack *middleware.Stack) error {
	m := middleware.FinalizeMiddlewareFunc(sendTimeMiddlewareID, func(ctx context.Context, in middleware.FinalizeInput,
		next middleware.FinalizeHandler,
	) (middleware.FinalizeOutput, middleware.Metadata, error) {
		sent := time.Now()
		out, md, err := next.HandleFinalize(ctx, in)
		md.Set(attemptSentKey{}, sent)
		return out, md, err
	})
	if err := stack.Finalize.Insert(m, (&retry.Attempt{}).ID(), middleware.After); err == nil {
		return nil
	}
	// A stack without the retry middleware: every call is one attempt.
	return stack.Finalize.Add(m, middleware.After)
}

// sentAt returns when the SDK sent the attempt that answered a call, read
// from the call's result metadata md, or called (when the cloud layer
// called the SDK) when md does not say.
func sentAt(md middleware.Metadata, called time.Time) time.Time {
	if t, ok := md.Get(attemptSentKey{}).(time.Time); ok {
		return t
	}
	return called
}

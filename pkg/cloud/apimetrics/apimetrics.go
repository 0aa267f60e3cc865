// Package apimetrics records every request the AWS SDK sends as Prometheus
// metrics: requests, errors by error code, throttles and latency, per API
// operation. It is SDK middleware, so it counts each attempt the SDK's
// retryer makes, which is what EC2 bills against the account's rate limits
// and what an operator needs to see when the controller slows down. It also
// stamps each attempt's send time into its result metadata (SentAt), since
// it times the attempt anyway.
package apimetrics

import (
	"context"
	"errors"
	"time"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	"github.com/prometheus/client_golang/prometheus"
)

// Error-code label values for failures that carry no API error code.
const (
	// CodeCanceled labels an attempt cut short by its context.
	CodeCanceled = "RequestCanceled"
	// CodeConnection labels an attempt that got no answer (network, TLS).
	CodeConnection = "ConnectionError"
)

// middlewareID names the middleware in the SDK's stack.
const middlewareID = "diskplane/apimetrics"

// sentKey is the result-metadata key of an attempt's send time.
type sentKey struct{}

// SentAt returns when the SDK sent the attempt that answered a call, read
// from the call's result metadata (the SDK makes the last attempt's metadata
// the call's), and false when the call did not go through a Recorder. That
// is after the retryer's pacing and backoff: a caller timing what the
// request set off (a state change EC2 begins when it takes the request)
// counts from here, not from its SDK call, which may have begun seconds
// earlier.
func SentAt(md middleware.Metadata) (time.Time, bool) {
	t, ok := md.Get(sentKey{}).(time.Time)
	return t, ok
}

// Recorder holds the API metrics. One Recorder serves any number of clients.
type Recorder struct {
	// OnStrain, when set before the recorder serves a client, is called
	// with the operation and error code of every attempt EC2 refused for
	// exceeding the request rate or failed with a server error (an HTTP
	// status of 500 or more), so that its owner can ease off while EC2 is
	// strained.
	OnStrain func(operation, code string)

	requests  *prometheus.CounterVec
	errors    *prometheus.CounterVec
	throttles *prometheus.CounterVec
	duration  *prometheus.HistogramVec
}

// NewRecorder creates the metrics and registers them on reg (nil skips the
// registration, e.g. for a tool that does not serve metrics).
func NewRecorder(reg prometheus.Registerer) (*Recorder, error) {
	r := &Recorder{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "diskplane", Subsystem: "cloud", Name: "api_requests_total",
			Help: "Requests sent to the cloud API, by operation; each retry counts.",
		}, []string{"operation"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "diskplane", Subsystem: "cloud", Name: "api_request_errors_total",
			Help: "Failed cloud API requests, by operation and error code.",
		}, []string{"operation", "code"}),
		throttles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "diskplane", Subsystem: "cloud", Name: "api_request_throttles_total",
			Help: "Cloud API requests refused for exceeding the request rate, by operation.",
		}, []string{"operation"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "diskplane", Subsystem: "cloud", Name: "api_request_duration_seconds",
			Help:    "Latency of single cloud API requests (one attempt), by operation.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
		}, []string{"operation"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{r.requests, r.errors, r.throttles, r.duration} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return r, nil
}

// AddMiddleware puts the recorder into an SDK client's middleware stack
// (append it to the client's APIOptions). It sits after the retry
// middleware, so it sees each attempt on its own.
func (r *Recorder) AddMiddleware(stack *middleware.Stack) error {
	m := middleware.FinalizeMiddlewareFunc(middlewareID, r.handle)
	if err := stack.Finalize.Insert(m, (&retry.Attempt{}).ID(), middleware.After); err == nil {
		return nil
	}
	// A stack without the retry middleware: every request is one attempt.
	return stack.Finalize.Add(m, middleware.After)
}

func (r *Recorder) handle(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (
	middleware.FinalizeOutput, middleware.Metadata, error,
) {
	op := awsmiddleware.GetOperationName(ctx)
	start := time.Now()
	out, md, err := next.HandleFinalize(ctx, in)
	md.Set(sentKey{}, start)
	r.requests.WithLabelValues(op).Inc()
	r.duration.WithLabelValues(op).Observe(time.Since(start).Seconds())
	if err != nil {
		code := errorCode(ctx, err)
		r.errors.WithLabelValues(op, code).Inc()
		_, throttled := retry.DefaultThrottleErrorCodes[code]
		if throttled {
			r.throttles.WithLabelValues(op).Inc()
		}
		if (throttled || serverError(err)) && r.OnStrain != nil {
			r.OnStrain(op, code)
		}
	}
	return out, md, err
}

// serverError reports whether an attempt's answer had an HTTP status of 500
// or more: EC2 failed it on its side (InternalError, Unavailable, …).
func serverError(err error) bool {
	var resp interface{ HTTPStatusCode() int }
	return errors.As(err, &resp) && resp.HTTPStatusCode() >= 500
}

// errorCode is the label for a failed attempt: the API's error code, or what
// kept the request from getting one.
func errorCode(ctx context.Context, err error) string {
	var apiErr smithy.APIError
	switch {
	case errors.As(err, &apiErr) && apiErr.ErrorCode() != "":
		return apiErr.ErrorCode()
	case ctx.Err() != nil, errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return CodeCanceled
	default:
		return CodeConnection
	}
}

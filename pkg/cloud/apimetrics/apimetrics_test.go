package apimetrics

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// counterValue reads one counter of a vector.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// series counts the series a registry holds for one metric name.
func series(t *testing.T, reg prometheus.Gatherer, name string) int {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return len(f.GetMetric())
		}
	}
	return 0
}

// send runs one request for op through a stack holding only the recorder,
// with a transport that answers err.
func send(t *testing.T, r *Recorder, ctx context.Context, op string, err error) middleware.Metadata {
	t.Helper()
	stack := middleware.NewStack(op, smithyhttp.NewStackRequest)
	if e := r.AddMiddleware(stack); e != nil {
		t.Fatal(e)
	}
	transport := middleware.HandlerFunc(func(context.Context, any) (any, middleware.Metadata, error) {
		return nil, middleware.Metadata{}, err
	})
	ctx = awsmiddleware.SetOperationName(ctx, op)
	_, md, got := middleware.DecorateHandler(transport, stack).Handle(ctx, nil)
	if !errors.Is(got, err) {
		t.Fatalf("middleware changed the error: %v", got)
	}
	return md
}

// TestSentAt: each attempt's metadata says when it was sent, so that the
// cloud layer times a state change from the attempt EC2 took.
func TestSentAt(t *testing.T) {
	r, err := NewRecorder(nil)
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	md := send(t, r, context.Background(), "AttachVolume", nil)
	if sent, ok := SentAt(md); !ok || sent.Before(before) || sent.After(time.Now()) {
		t.Errorf("SentAt = %v, %v; want a time during the call (from %v)", sent, ok, before)
	}
	if _, ok := SentAt(middleware.Metadata{}); ok {
		t.Error("SentAt of metadata no recorder stamped reports a time")
	}
}

func TestRecorderCounts(t *testing.T) {
	throttle := &smithy.GenericAPIError{Code: "RequestLimitExceeded", Message: "slow down"}
	notFound := &smithy.GenericAPIError{Code: "InvalidVolume.NotFound", Message: "no"}
	serverFailed := withStatus{&smithy.GenericAPIError{Code: "InternalError", Message: "oops"}, 500}
	clientFailed := withStatus{&smithy.GenericAPIError{Code: "InvalidParameterValue", Message: "no"}, 400}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name          string
		ctx           context.Context
		err           error
		wantCode      string
		wantThrottled bool
		wantStrain    bool
	}{
		{"success", context.Background(), nil, "", false, false},
		{"API error", context.Background(), fmt.Errorf("wrapped: %w", notFound), "InvalidVolume.NotFound", false, false},
		{"throttled", context.Background(), throttle, "RequestLimitExceeded", true, true},
		{"server error", context.Background(), serverFailed, "InternalError", false, true},
		{"client error with a status", context.Background(), clientFailed, "InvalidParameterValue", false, false},
		{"cancelled", cancelled, context.Canceled, CodeCanceled, false, false},
		{"no answer", context.Background(), errors.New("connection reset"), CodeConnection, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			r, err := NewRecorder(reg)
			if err != nil {
				t.Fatal(err)
			}
			var told []string
			r.OnStrain = func(op, code string) { told = append(told, op+" "+code) }
			send(t, r, tc.ctx, "AttachVolume", tc.err)
			send(t, r, context.Background(), "DescribeVolumes", nil)

			if got := counterValue(t, r.requests.WithLabelValues("AttachVolume")); got != 1 {
				t.Errorf("AttachVolume requests = %v, want 1", got)
			}
			if got := counterValue(t, r.requests.WithLabelValues("DescribeVolumes")); got != 1 {
				t.Errorf("DescribeVolumes requests = %v, want 1", got)
			}
			wantErrors := 0
			if tc.wantCode != "" {
				wantErrors = 1
				if got := counterValue(t, r.errors.WithLabelValues("AttachVolume", tc.wantCode)); got != 1 {
					t.Errorf("errors{code=%s} = %v, want 1", tc.wantCode, got)
				}
			}
			if got := series(t, reg, "diskplane_cloud_api_request_errors_total"); got != wantErrors {
				t.Errorf("%d error series, want %d", got, wantErrors)
			}
			wantThrottles := 0
			if tc.wantThrottled {
				wantThrottles = 1
			}
			if got := series(t, reg, "diskplane_cloud_api_request_throttles_total"); got != wantThrottles {
				t.Errorf("%d throttle series, want %d", got, wantThrottles)
			}
			if want := []string{"AttachVolume " + tc.wantCode}; tc.wantStrain != (len(told) == 1) || tc.wantStrain && told[0] != want[0] {
				t.Errorf("OnStrain told of %v, want %v: %v", told, tc.wantStrain, want)
			}
			if got := series(t, reg, "diskplane_cloud_api_request_duration_seconds"); got != 2 {
				t.Errorf("%d latency series, want one per operation", got)
			}
		})
	}
}

func TestMiddlewareRunsAfterRetry(t *testing.T) {
	r, err := NewRecorder(nil)
	if err != nil {
		t.Fatal(err)
	}
	stack := middleware.NewStack("op", smithyhttp.NewStackRequest)
	if err := stack.Finalize.Add(retry.NewAttemptMiddleware(aws.NopRetryer{}, smithyhttp.RequestCloner), middleware.After); err != nil {
		t.Fatal(err)
	}
	if err := stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("Signing", func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
		return next.HandleFinalize(ctx, in)
	}), middleware.After); err != nil {
		t.Fatal(err)
	}
	if err := r.AddMiddleware(stack); err != nil {
		t.Fatal(err)
	}
	ids := stack.Finalize.List()
	retryAt, oursAt := slices.Index(ids, "Retry"), slices.Index(ids, middlewareID)
	if retryAt < 0 || oursAt != retryAt+1 {
		t.Errorf("finalize order %v: the recorder must follow the retry middleware directly", ids)
	}
}

func TestRegisterTwiceFails(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := NewRecorder(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := NewRecorder(reg); err == nil {
		t.Error("a second recorder on the same registry registered without error")
	}
}

// withStatus is an API error answered with an HTTP status, as the SDK's
// response errors are.
type withStatus struct {
	*smithy.GenericAPIError
	status int
}

func (e withStatus) HTTPStatusCode() int { return e.status }

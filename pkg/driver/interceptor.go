package driver

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// rpcDuration records how long each CSI call took and how it ended, so an
// operator can see slow attaches or a burst of Aborted retries without
// raising log verbosity.
var rpcDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Namespace: "diskplane",
	Subsystem: "csi",
	Name:      "operation_duration_seconds",
	Help:      "Duration of CSI RPCs served by the plugin, by method and gRPC status code.",
	Buckets:   []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300},
}, []string{"method", "code"})

// RegisterMetrics adds the gRPC server metrics to a registry.
func RegisterMetrics(r prometheus.Registerer) error {
	return r.Register(rpcDuration)
}

// logAndMeasure is the unary interceptor every CSI RPC passes through. It
// logs the request at V(4) with every credential replaced (the fields the
// CSI spec marks csi_secret, so no stage, publish or expand secret reaches a
// log, and the service-account tokens the kubelet may put into a volume
// context), scrubs the request's credentials out of the error it returns
// (the CO shows that error in events), logs each failure exactly once at
// error level, and records the call's duration. Handlers must therefore not
// log the error they return.
func logAndMeasure(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	if logger := klog.V(4); logger.Enabled() {
		logger.InfoS("CSI request", "method", info.FullMethod, "request", loggable(req))
	}
	resp, err := handler(ctx, req)
	err = scrubError(err, credentials(req))
	elapsed := time.Since(start)
	code := status.Code(err)
	rpcDuration.WithLabelValues(info.FullMethod, code.String()).Observe(elapsed.Seconds())
	if err != nil {
		klog.ErrorS(err, "CSI request failed", "method", info.FullMethod, "code", code.String(), "duration", elapsed)
		return resp, err
	}
	if logger := klog.V(4); logger.Enabled() {
		logger.InfoS("CSI response", "method", info.FullMethod, "response", loggable(resp), "duration", elapsed)
	}
	return resp, nil
}

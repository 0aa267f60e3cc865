// Package metrics serves the plugin's operational HTTP endpoint: Prometheus
// metrics on /metrics and a liveness check on /healthz. The liveness check
// calls the plugin's own CSI Probe in process, so the node DaemonSet can run
// as a single container without the livenessprobe sidecar.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
)

// NewRegistry returns a registry with the Go runtime and process collectors,
// ready for the driver and cloud layers to add their own metrics. A private
// registry (rather than the global default) keeps tests independent.
func NewRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// HealthCheck reports whether the plugin is healthy; a nil error means yes.
type HealthCheck func(ctx context.Context) error

// healthTimeout bounds one /healthz check so a hung cloud call cannot pile up
// probe requests.
const healthTimeout = 10 * time.Second

// Handler returns the HTTP handler with /metrics and /healthz.
func Handler(g prometheus.Gatherer, health HealthCheck) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), healthTimeout)
		defer cancel()
		if err := health(ctx); err != nil {
			klog.V(2).InfoS("Health check failed", "err", err)
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = fmt.Fprintln(w, "ok")
	})
	return mux
}

// Serve listens on addr (host:port) and serves Handler until ctx is done.
func Serve(ctx context.Context, addr string, g prometheus.Gatherer, health HealthCheck) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on http endpoint %s: %w", addr, err)
	}
	return ServeListener(ctx, l, g, health)
}

// ServeListener is Serve on an existing listener (tests use port 0).
func ServeListener(ctx context.Context, l net.Listener, g prometheus.Gatherer, health HealthCheck) error {
	srv := &http.Server{Handler: Handler(g, health), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	klog.InfoS("Serving metrics and health", "address", l.Addr().String())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

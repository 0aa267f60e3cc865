package ec2api

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/diskplane/diskplane/pkg/emulator/servicemetrics"
)

// Metrics counts and times every EC2 request the emulator answers, by action
// and by outcome (an EC2 error code, or "Success"), so tests and benchmarks
// can count the calls a driver makes and see its throttling and errors.
type Metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// outcomeSuccess labels answered requests that did not fail.
const outcomeSuccess = "Success"

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ec2_emulator_api_requests_total",
			Help: "EC2 API requests answered by the emulator, by action and outcome (EC2 error code or Success).",
		}, []string{"action", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ec2_emulator_api_request_duration_seconds",
			Help:    "Time the emulator took to answer EC2 API requests, including injected latency, by action.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"action"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// observe records one answered request.
func (m *Metrics) observe(action, code string, seconds float64) {
	if m == nil {
		return
	}
	if code == "" {
		code = outcomeSuccess
	}
	m.requests.WithLabelValues(action, code).Inc()
	m.duration.WithLabelValues(action).Observe(seconds)
}

// Count returns how many requests of action were answered with code; an
// empty code counts every outcome.
func (m *Metrics) Count(action, code string) int {
	return servicemetrics.Sum(m.requests, map[string]string{"action": action, "code": code})
}

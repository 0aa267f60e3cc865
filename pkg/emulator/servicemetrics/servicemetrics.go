// Package servicemetrics counts the requests the emulator's STS and KMS
// answer, by action and outcome, so tests can count what a driver asks of
// them: that a republish with an already-authorised token costs no call,
// that each pod's publish costs one AssumeRoleWithWebIdentity and one
// Decrypt.
package servicemetrics

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Success labels answered requests that did not fail.
const Success = "Success"

// Metrics is the request counter of the emulator's STS and KMS.
type Metrics struct {
	requests *prometheus.CounterVec
}

// New creates the counter and registers it with reg.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{requests: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ec2_emulator_service_requests_total",
		Help: "STS and KMS requests answered by the emulator, by service, action and outcome (error code or Success).",
	}, []string{"service", "action", "code"})}
	if err := reg.Register(m.requests); err != nil {
		return nil, err
	}
	return m, nil
}

// Observe counts one answered request; an empty code is Success. A nil
// Metrics counts nothing.
func (m *Metrics) Observe(service, action, code string) {
	if m == nil {
		return
	}
	if code == "" {
		code = Success
	}
	m.requests.WithLabelValues(service, action, code).Inc()
}

// Count returns how many requests of service and action were answered
// with code; an empty code counts every outcome.
func (m *Metrics) Count(service, action, code string) int {
	return Sum(m.requests, map[string]string{"service": service, "action": action, "code": code})
}

// Sum adds up the counters a collector holds whose labels have the values
// match gives (an empty value matches any): how the emulator's tests count
// requests by action and outcome.
func Sum(c prometheus.Collector, match map[string]string) int {
	ch := make(chan prometheus.Metric, 64)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	total := 0.0
	for metric := range ch {
		var d dto.Metric
		if metric.Write(&d) != nil {
			continue
		}
		labels := map[string]string{}
		for _, l := range d.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		matches := true
		for name, want := range match {
			if want != "" && labels[name] != want {
				matches = false
			}
		}
		if matches {
			total += d.GetCounter().GetValue()
		}
	}
	return int(total)
}

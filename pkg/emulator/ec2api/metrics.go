package ec2api

import (
	"net/url"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/diskplane/diskplane/pkg/emulator/servicemetrics"
)

// Metrics counts and times every EC2 request the emulator answers, by action
// and by outcome (an EC2 error code, or "Success"), so tests and benchmarks
// can count the calls a driver makes and see its throttling and errors.
type Metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	reads    *prometheus.CounterVec
}

// The ways a Describe request selects what it reads (the selection label):
// a driver's lookups by ID and by filter (a volume's name tag) cost calls
// of the same action, and this tells them apart.
const (
	selectionIDs     = "ids"
	selectionFilters = "filters"
	selectionBoth    = "ids and filters"
	selectionAll     = "all"
)

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
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ec2_emulator_api_read_selections_total",
			Help: "Describe requests the emulator answered without an error, by action and by what they selected: ids, filters, ids and filters, or all.",
		}, []string{"action", "selection"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.reads} {
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

// observeRead records what an answered Describe request selected: IDs
// (VolumeId.1, InstanceId.1 …), filters (Filter.1.Name …), both, or
// neither (every resource, page by page).
func (m *Metrics) observeRead(action string, form url.Values) {
	if m == nil || !strings.HasPrefix(action, "Describe") {
		return
	}
	ids, filters := false, false
	for key := range form {
		name, _, numbered := strings.Cut(key, ".")
		switch {
		case !numbered:
		case name == "Filter":
			filters = true
		case strings.HasSuffix(name, "Id"):
			ids = true
		}
	}
	selection := selectionAll
	switch {
	case ids && filters:
		selection = selectionBoth
	case ids:
		selection = selectionIDs
	case filters:
		selection = selectionFilters
	}
	m.reads.WithLabelValues(action, selection).Inc()
}

// CountReads returns how many answered requests of a Describe action
// selected what selection names (see observeRead).
func (m *Metrics) CountReads(action, selection string) int {
	return servicemetrics.Sum(m.reads, map[string]string{"action": action, "selection": selection})
}

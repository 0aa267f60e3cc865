package testutil

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// RecordingRegisterer registers collectors on the Registerer it wraps and
// remembers them, so a test can list every metric a component registers,
// also the labelled ones that have no sample yet (a registry's Gather leaves
// those out).
type RecordingRegisterer struct {
	prometheus.Registerer
	Collectors []prometheus.Collector
}

// Register registers c on the wrapped Registerer and records it.
func (r *RecordingRegisterer) Register(c prometheus.Collector) error {
	if err := r.Registerer.Register(c); err != nil {
		return err
	}
	r.Collectors = append(r.Collectors, c)
	return nil
}

// MustRegister is Register that panics on failure, as Registerer's contract says.
func (r *RecordingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// descPattern reads a metric description's name and variable labels out of
// prometheus.Desc's String, the only place the client library shows them.
var descPattern = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), help: ("(?:[^"\\]|\\.)*"), .*variableLabels: \{([^}]*)\}\}$`)

// RecordedMetrics describes the metrics of every recorded collector. The
// labelled kinds (CounterVec, GaugeVec, HistogramVec, SummaryVec) are read
// from their descriptions; any other collector is gathered on a registry of
// its own, as it has samples from the start.
func (r *RecordingRegisterer) RecordedMetrics() ([]Metric, error) {
	var out []Metric
	for _, c := range r.Collectors {
		var typ string
		switch c.(type) {
		case *prometheus.CounterVec:
			typ = "counter"
		case *prometheus.GaugeVec:
			typ = "gauge"
		case *prometheus.HistogramVec:
			typ = "histogram"
		case *prometheus.SummaryVec:
			typ = "summary"
		default:
			reg := prometheus.NewPedanticRegistry()
			if err := reg.Register(c); err != nil {
				return nil, err
			}
			families, err := reg.Gather()
			if err != nil {
				return nil, err
			}
			out = append(out, GatheredMetrics(families)...)
			continue
		}
		descs := make(chan *prometheus.Desc, 16)
		go func() {
			c.Describe(descs)
			close(descs)
		}()
		for d := range descs {
			m := descPattern.FindStringSubmatch(d.String())
			if m == nil {
				return nil, fmt.Errorf("cannot read the metric description %s", d)
			}
			name, _ := strconv.Unquote(m[1])
			help, _ := strconv.Unquote(m[2])
			var labels []string
			if m[3] != "" {
				labels = strings.Split(m[3], ",")
			}
			out = append(out, Metric{Name: name, Type: typ, Labels: labels, Help: help})
		}
	}
	return out, nil
}

// GatheredMetrics describes gathered metric families (what a registry
// serves): name, type, the labels of their samples and help.
func GatheredMetrics(families []*dto.MetricFamily) []Metric {
	out := make([]Metric, 0, len(families))
	for _, f := range families {
		m := Metric{Name: f.GetName(), Type: strings.ToLower(f.GetType().String()), Help: f.GetHelp()}
		for _, sample := range f.GetMetric() {
			for _, l := range sample.GetLabel() {
				if !slices.Contains(m.Labels, l.GetName()) {
					m.Labels = append(m.Labels, l.GetName())
				}
			}
		}
		out = append(out, m)
	}
	return out
}

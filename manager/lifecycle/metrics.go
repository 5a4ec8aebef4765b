package lifecycle

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the manager's Prometheus instruments.
type Metrics struct {
	Registry  *prometheus.Registry
	Resolve   *prometheus.HistogramVec // by result: ok, unauthenticated, forbidden, capacity, unavailable, bad_request
	Provision prometheus.Histogram
	Start     prometheus.Histogram
	Pause     prometheus.Histogram
	Unpause   prometheus.Histogram
	Wake      prometheus.Histogram
	Unknown   prometheus.Gauge
}

var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// NewMetrics registers the instruments; states reports sandbox counts by state.
func NewMetrics(states func() map[string]int) *Metrics {
	h := func(name, help string) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: latencyBuckets})
	}
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		Resolve: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "affido_resolve_seconds", Help: "forward_auth resolve latency by result", Buckets: latencyBuckets,
		}, []string{"result"}),
		Provision: h("affido_provision_seconds", "time to create network, volumes and container"),
		Start:     h("affido_start_seconds", "time to start a stopped sandbox container"),
		Pause:     h("affido_pause_seconds", "time to pause a sandbox container"),
		Unpause:   h("affido_unpause_seconds", "time to unpause a sandbox container"),
		Wake:      h("affido_wake_seconds", "time from a stored wake deadline to the agent's /wake answer"),
		Unknown: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "affido_unknown_objects", Help: "labelled Docker objects with no registry row, found by the last reconcile",
		}),
	}
	byState := prometheus.NewDesc("affido_sandboxes", "sandboxes by state", []string{"state"}, nil)
	m.Registry.MustRegister(m.Resolve, m.Provision, m.Start, m.Pause, m.Unpause, m.Wake, m.Unknown,
		collectorFunc{desc: byState, collect: func(ch chan<- prometheus.Metric) {
			for s, n := range states() {
				ch <- prometheus.MustNewConstMetric(byState, prometheus.GaugeValue, float64(n), s)
			}
		}})
	return m
}

type collectorFunc struct {
	desc    *prometheus.Desc
	collect func(chan<- prometheus.Metric)
}

func (c collectorFunc) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c collectorFunc) Collect(ch chan<- prometheus.Metric) { c.collect(ch) }

package kit

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Claim operations, the values of the metrics' operation label.
const (
	opPrepare   = "prepare"
	opUnprepare = "unprepare"
)

// Metrics are a driver's Prometheus metrics, in a registry of their own
// (with the Go runtime's and the process's), labelled with the driver's
// name. A nil *Metrics records nothing.
type Metrics struct {
	registry *prometheus.Registry
	prepared prometheus.Gauge
	calls    *prometheus.CounterVec
	errors   *prometheus.CounterVec
	duration *prometheus.HistogramVec
	health   *prometheus.GaugeVec
}

// NewMetrics returns the metrics of the named driver, all zero.
func NewMetrics(driver string) *Metrics {
	labels := prometheus.Labels{"driver": driver}
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		prepared: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dralab_driver_prepared_claims", ConstLabels: labels,
			Help: "Claims the driver has prepared and not unprepared, as its checkpoint holds them.",
		}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dralab_driver_claim_operations_total", ConstLabels: labels,
			Help: "Claims the kubelet asked the driver to prepare or unprepare, by operation.",
		}, []string{"operation"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dralab_driver_claim_operation_errors_total", ConstLabels: labels,
			Help: "Claims the driver failed to prepare or unprepare, by operation.",
		}, []string{"operation"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "dralab_driver_claim_operation_duration_seconds", ConstLabels: labels,
			Help: "Time to prepare or unprepare one claim, CDI spec and checkpoint written, by operation.",
			// From a cached claim (under a millisecond) to a slow disk.
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"operation"}),
		health: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "dralab_driver_devices", ConstLabels: labels,
			Help: "The driver's devices by health, as it reports them to the kubelet: healthy, unhealthy, or unknown (not watched).",
		}, []string{"health"}),
	}
	m.registry.MustRegister(m.prepared, m.calls, m.errors, m.duration, m.health,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, op := range []string{opPrepare, opUnprepare} {
		// Present at zero, so that a rate is defined before the first call.
		m.calls.WithLabelValues(op)
		m.errors.WithLabelValues(op)
	}
	return m
}

// Handler serves the metrics in Prometheus's text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{Registry: m.registry})
}

// observe records one claim's operation, begun at start.
func (m *Metrics) observe(op string, start time.Time, err error) {
	if m == nil {
		return
	}
	m.calls.WithLabelValues(op).Inc()
	m.duration.WithLabelValues(op).Observe(time.Since(start).Seconds())
	if err != nil {
		m.errors.WithLabelValues(op).Inc()
	}
}

// setHealth records how many devices are of each health.
func (m *Metrics) setHealth(healthy, unhealthy, unknown int) {
	if m == nil {
		return
	}
	m.health.WithLabelValues("healthy").Set(float64(healthy))
	m.health.WithLabelValues("unhealthy").Set(float64(unhealthy))
	m.health.WithLabelValues("unknown").Set(float64(unknown))
}

func (m *Metrics) setPrepared(n int) {
	if m != nil {
		m.prepared.Set(float64(n))
	}
}

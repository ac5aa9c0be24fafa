package fenceagent

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/fencestate"
)

// allStatuses lists every status so that the status gauge exports a 0 for
// each one that is not current (alerts can then match on the value).
var allStatuses = fencestate.Statuses()

// metrics are the agent's Prometheus metrics.
type metrics struct {
	status       *prometheus.GaugeVec
	declarations *prometheus.CounterVec
	duration     prometheus.Histogram
	transitions  *prometheus.CounterVec
	watchRetries prometheus.Counter
	writeErrors  prometheus.Counter
	checkWaiters prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		status: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fencegate_fence_status",
			Help: "This cluster's fence status: 1 for the current status, 0 for the others.",
		}, []string{"status"}),
		declarations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencegate_fence_declarations_total",
			Help: "Epoch declarations to the fence authority, by result (ok, fenced, epoch_regressed, acquiring, permission_denied, refused, unsupported, transient, error).",
		}, []string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fencegate_fence_declaration_duration_seconds",
			Help:    "Time from sending an epoch declaration to its answer or error.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 13),
		}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencegate_fence_transitions_total",
			Help: "Fence status transitions of this cluster.",
		}, []string{"from", "to"}),
		watchRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencegate_fence_watch_reconnects_total",
			Help: "Times the WatchFence subscription ended or failed and was opened again.",
		}),
		writeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencegate_fence_store_write_errors_total",
			Help: "Failed writes of data.fence into the policy store.",
		}),
		checkWaiters: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fencegate_fence_check_waiters",
			Help: "Callers waiting for the fence authority's first answer (they share one declaration).",
		}),
	}
	for _, s := range allStatuses {
		m.status.WithLabelValues(string(s))
	}
	for _, k := range answerKinds {
		m.declarations.WithLabelValues(k.result())
	}
	if reg == nil {
		return m, nil
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.status, m.declarations, m.duration, m.transitions, m.watchRetries, m.writeErrors, m.checkWaiters} {
		if err := reg.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("register fence agent metrics (one fence agent per registry): %w", errors.Join(errs...))
	}
	return m, nil
}

// setStatus makes s the one current status.
func (m *metrics) setStatus(s fencestate.Status) {
	for _, each := range allStatuses {
		v := 0.0
		if each == s {
			v = 1
		}
		m.status.WithLabelValues(string(each)).Set(v)
	}
}

package fenceobject

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/internal/promreg"
)

// metrics are the Fence object's Prometheus metrics.
type metrics struct {
	// enforced is set by every replica from the Fence it watches, so that
	// all of them agree with the object.
	enforced prometheus.Gauge
	// quiesced is the Fence's Quiesced condition, set by every replica
	// likewise: 1 for its status and reason, no other series.
	quiesced *prometheus.GaugeVec
	// failover is observed by the leader of the cluster failed over to.
	failover prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		enforced: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fencegate_fence_enforced",
			Help: "1 while the Fence's Enforced condition is True: every fencegate replica of this cluster applies the current fence state and every Component is marked for it.",
		}),
		quiesced: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fencegate_fence_quiesced",
			Help: "The Fence's Quiesced condition: 1 for its status (True, False, Unknown) and reason (Quiesced, NotQuiet, HoldsPending, FenceHeld, NoHeldKinds), no series before the condition is written.",
		}, []string{"status", "reason"}),
		failover: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fencegate_failover_duration_seconds",
			Help:    "Time from the moment a raised spec.epoch of the Fence is seen until this cluster is Holding and Enforced.",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120},
		}),
	}
	if err := promreg.Register(reg, "fence object", m.enforced, m.quiesced, m.failover); err != nil {
		return nil, err
	}
	return m, nil
}

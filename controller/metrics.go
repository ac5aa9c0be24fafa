package controller

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/internal/promreg"
)

// metrics are the controller's Prometheus metrics.
//
// Reconciles are counted by controller-runtime
// (controller_runtime_reconcile_total{controller="component"}), beside its
// errors and durations; a counter of fencegate's own would say the same.
type metrics struct {
	// held is set from Marks, which knows every Component's last mark.
	held          *prometheus.GaugeVec
	eventsDropped prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fencegate_components_held",
			Help: "Components of a served fence domain that this cluster currently holds off (SourceConflict=True), by domain.",
		}, []string{"domain"}),
		eventsDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencegate_controller_events_dropped_total",
			Help: "Fence transition Events not recorded because the shared Event budget was spent.",
		}),
	}
	if err := promreg.Register(reg, "controller", m.held, m.eventsDropped); err != nil {
		return nil, err
	}
	return m, nil
}

package controller

import (
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
)

// metrics are the controller's Prometheus metrics.
//
// Reconciles are counted by controller-runtime
// (controller_runtime_reconcile_total{controller="component"}), beside its
// errors and durations; a counter of fencegate's own would say the same.
type metrics struct {
	held          prometheus.Gauge
	eventsDropped prometheus.Counter

	mu      sync.Mutex
	heldSet map[types.NamespacedName]struct{}
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fencegate_components_held",
			Help: "Components that this cluster currently holds off (SourceConflict=True).",
		}),
		eventsDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencegate_controller_events_dropped_total",
			Help: "Fence transition Events not recorded because the shared Event budget was spent.",
		}),
		heldSet: map[types.NamespacedName]struct{}{},
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.held, m.eventsDropped} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register controller metrics: %w", err)
		}
	}
	return m, nil
}

// observe records whether a Component is held.
func (m *metrics) observe(name types.NamespacedName, held bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if held {
		m.heldSet[name] = struct{}{}
	} else {
		delete(m.heldSet, name)
	}
	m.held.Set(float64(len(m.heldSet)))
}

// forget drops a deleted Component from the held count.
func (m *metrics) forget(name types.NamespacedName) { m.observe(name, false) }

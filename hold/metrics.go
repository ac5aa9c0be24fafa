package hold

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	actions  *prometheus.CounterVec
	failures *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencegate_hold_actions_total",
			Help: "Holds and releases of actuators' objects, by domain, kind (Kind.group) and action (hold, release).",
		}, []string{"domain", "kind", "action"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencegate_hold_failures_total",
			Help: "Holds and releases that failed (a patch refused, a record that is not fencegate's), by domain and kind; they are retried.",
		}, []string{"domain", "kind"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.actions, m.failures} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register hold metrics: %w", err)
			}
		}
	}
	return m, nil
}

package hold

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/internal/promreg"
)

type metrics struct {
	actions  *prometheus.CounterVec
	failures *prometheus.CounterVec
	reverts  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencegate_hold_actions_total",
			Help: "Holds and releases of actuators' objects, by domain, kind (Kind.group) and action (hold, release).",
		}, []string{"domain", "kind", "action"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencegate_hold_failures_total",
			Help: "Holds and releases that failed (a patch refused, retried), records fencegate did not write set aside, and releases refused for such a record, by domain and kind.",
		}, []string{"domain", "kind"}),
	}
	m.reverts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencegate_hold_reverts_total",
		Help: "Held objects found set back while held (by a parent applying its declared state, or a person) and held again, by domain and kind.",
	}, []string{"domain", "kind"})
	if err := promreg.Register(reg, "hold controller", m.actions, m.failures, m.reverts); err != nil {
		return nil, err
	}
	return m, nil
}

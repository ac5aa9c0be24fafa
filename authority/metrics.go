package authority

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/internal/promreg"
)

// metrics are the FenceService's Prometheus metrics; the store registers
// its own (transactions, retries, grants, tokens) on the same registerer.
type metrics struct {
	declarations *prometheus.CounterVec
	releases     *prometheus.CounterVec
	revocations  *prometheus.CounterVec
	forgets      *prometheus.CounterVec
	watchers     prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		declarations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencegate_authority_declarations_total",
			Help: "DeclareClusterEpoch calls by result: ok, fenced, epoch_regressed, acquiring, invalid, limited (too many instances of the holder) or error.",
		}, []string{"result"}),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencegate_authority_releases_total",
			Help: "ReleaseFence calls by result: released, already_released, no_lease, not_holder, epoch_regressed, invalid or error.",
		}, []string{"result"}),
		revocations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencegate_authority_revocations_total",
			Help: "RevokeFence calls by result: revoked, already_revoked, no_lease, not_holder, invalid or error.",
		}, []string{"result"}),
		forgets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencegate_authority_forgets_total",
			Help: "ForgetCluster calls by result: forgotten, in_use, unknown, invalid or error.",
		}, []string{"result"}),
		watchers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fencegate_authority_watchers",
			Help: "WatchFence streams open now.",
		}),
	}
	if err := promreg.Register(reg, "authority", m.declarations, m.releases, m.revocations, m.forgets, m.watchers); err != nil {
		return nil, err
	}
	return m, nil
}

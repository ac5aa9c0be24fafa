package store

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the store's Prometheus metrics.
type metrics struct {
	txnDuration *prometheus.HistogramVec
	retries     *prometheus.CounterVec
	grants      *prometheus.CounterVec
	token       *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		txnDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fencegate_authority_store_transaction_duration_seconds",
			Help:    "Latency of the etcd transactions that store fence state, by result (committed, conflict, error).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"result"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencegate_authority_store_retries_total",
			Help: "Store transactions retried, by reason: conflict (another writer changed the record first) or unavailable (etcd could not answer).",
		}, []string{"reason"}),
		grants: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencegate_authority_grants_total",
			Help: "Fences granted, by domain and kind: first, after_release or after_expiry (the previous holder stopped renewing).",
		}, []string{"domain", "kind"}),
		token: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fencegate_authority_fence_token",
			Help: "The current fencing token of each domain's holder, as last seen by this authority.",
		}, []string{"domain"}),
	}
	for _, c := range []prometheus.Collector{m.txnDuration, m.retries, m.grants, m.token} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register store metrics: %w", err)
		}
	}
	return m, nil
}

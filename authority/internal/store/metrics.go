package store

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/authority/statemachine"
	"github.com/fencegate/fencegate/internal/promreg"
)

// metrics are the store's Prometheus metrics.
type metrics struct {
	txnDuration *prometheus.HistogramVec
	retries     *prometheus.CounterVec
	grants      *prometheus.CounterVec
	token       *prometheus.GaugeVec
	leaseExpiry *prometheus.GaugeVec
	etcdWatches prometheus.Gauge
	// cachedAnswers counts the declarations answered without etcd.
	cachedAnswers prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		txnDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fencegate_authority_store_transaction_duration_seconds",
			Help:    "Latency of the etcd transactions that store fence state, by result: committed (a change written), checked (an answer that changes nothing, checked against the current record without a write), conflict, error.",
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
		// An alert on "no holder" compares it with the time: it needs no
		// state of its own and holds across replicas (the highest wins).
		leaseExpiry: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fencegate_authority_holder_lease_expiry_timestamp_seconds",
			Help: "When the lease of each domain's holder ends unless renewed (Unix time), as last committed by this authority; 0 once every instance of the holder released. Past it the domain has no holder.",
		}, []string{"domain"}),
		etcdWatches: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fencegate_authority_etcd_watches",
			Help: "The etcd watches this authority keeps open: one per domain that fence watchers (fencegate_authority_watchers) follow, however many they are.",
		}),
		cachedAnswers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencegate_authority_store_cached_answers_total",
			Help: "Declarations that changed nothing (a standby's, a holder's kept lease), answered from the record this authority confirmed with etcd less than a second before, without a transaction.",
		}),
	}
	if err := promreg.Register(reg, "store", m.txnDuration, m.retries, m.grants, m.token, m.leaseExpiry, m.etcdWatches, m.cachedAnswers); err != nil {
		return nil, err
	}
	return m, nil
}

// observeHolder records the holder of a domain's committed record.
func (m *metrics) observeHolder(domain string, h *statemachine.Holder) {
	m.token.WithLabelValues(domain).Set(float64(h.Token))
	expiry := 0.0
	if !h.Released {
		expiry = float64(h.LeaseExpiresAt) / float64(time.Second)
	}
	m.leaseExpiry.WithLabelValues(domain).Set(expiry)
}

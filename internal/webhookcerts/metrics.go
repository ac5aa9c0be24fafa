package webhookcerts

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/internal/promreg"
)

// metrics let an operator alert on a certificate that is not being renewed
// long before the API server starts refusing the webhook.
type metrics struct {
	expiry     *prometheus.GaugeVec
	issued     *prometheus.CounterVec
	syncErrors prometheus.Counter
}

func newMetrics() *metrics {
	return &metrics{
		expiry: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fencegate_webhook_certificate_expiry_timestamp_seconds",
			Help: "When the webhook's current CA and serving certificate expire (Unix time), by certificate (ca, serving).",
		}, []string{"certificate"}),
		issued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencegate_webhook_certificates_issued_total",
			Help: "Webhook certificates issued by this replica, by certificate (ca, serving).",
		}, []string{"certificate"}),
		syncErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencegate_webhook_certificate_sync_errors_total",
			Help: "Failed attempts to put the webhook certificates in place (each is retried with backoff).",
		}),
	}
}

func (m *metrics) register(reg prometheus.Registerer) error {
	return promreg.Register(reg, "webhook certificate", m.expiry, m.issued, m.syncErrors)
}

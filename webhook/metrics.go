package webhook

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/internal/promreg"
)

// Results of the decisions counter.
const (
	resultAllowed = "allowed"
	resultDenied  = "denied"
	resultError   = "error"
	resultInvalid = "invalid"
)

// metrics are the webhook's Prometheus metrics.
type metrics struct {
	decisions *prometheus.CounterVec
	duration  *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencegate_admission_decisions_total",
			Help: "Admission requests answered, by endpoint (validate, mutate), operation, result (allowed, denied, error, invalid) and the object's fence domain (unserved for a domain this fencegate does not serve, empty when the request was not read).",
		}, []string{"endpoint", "operation", "result", "domain"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "fencegate_admission_duration_seconds",
			Help: "Time from reading an admission request to writing its response, by endpoint.",
			// A decision takes tens of microseconds; the API server's
			// default webhook timeout is 10s.
			Buckets: []float64{10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 100e-3, 1},
		}, []string{"endpoint"}),
	}
	if err := promreg.Register(reg, "webhook", m.decisions, m.duration); err != nil {
		return nil, err
	}
	return m, nil
}

// unservedDomain is the domain label of a decision on an object of a domain
// that is not served: the label's values stay bounded by the served
// domains whatever labels objects carry.
const unservedDomain = "unserved"

// domainLabel bounds the domain label to the served domains.
func domainLabel(domain string, served func(string) bool) string {
	if domain == "" || served(domain) {
		return domain
	}
	return unservedDomain
}

// operationLabel bounds the operation label to the values Kubernetes sends.
func operationLabel(op string) string {
	switch op {
	case "CREATE", "UPDATE", "DELETE", "CONNECT":
		return op
	case "":
		return "unknown"
	default:
		return "other"
	}
}

package fenceagent

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/internal/promreg"
)

// refusalReasons are the refusals that wait for an operator while the
// status alone does not say so (a holder refused a raise for its step stays
// active), each exported by fencegate_fence_refused.
var refusalReasons = []string{rpctypes.ReasonEpochStepTooLarge, rpctypes.ReasonClusterRestored}

// refusedHelp is fencegate_fence_refused's help.
const refusedHelp = "1 while the fence authority refuses this cluster's declarations for reason, 0 otherwise: EPOCH_STEP_TOO_LARGE (the epoch asked for, whether or not the last accepted one is declared instead) or CLUSTER_RESTORED."

// allStatuses lists every status so that the status gauge exports a 0 for
// each one that is not current (alerts can then match on the value).
var allStatuses = fencestate.Statuses()

// metrics are the agent's Prometheus metrics.
type metrics struct {
	status       *prometheus.GaugeVec
	declarations *prometheus.CounterVec
	duration     prometheus.Histogram
	transitions  *prometheus.CounterVec
	watchRetries prometheus.Counter
	writeErrors  prometheus.Counter
	checkWaiters prometheus.Gauge
	epoch        prometheus.Gauge
	holder       *prometheus.GaugeVec
	token        prometheus.Gauge
	lastAnswer   *prometheus.GaugeVec
	refused      *prometheus.GaugeVec
	// holderName is the holder label exported now.
	holderName string
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		status: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fencegate_fence_status",
			Help: "This cluster's fence status: 1 for the current status, 0 for the others.",
		}, []string{"status"}),
		declarations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencegate_fence_declarations_total",
			Help: "Epoch declarations to the fence authority, by result (ok, fenced, epoch_regressed, acquiring, permission_denied, refused, unsupported, transient, error).",
		}, []string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fencegate_fence_declaration_duration_seconds",
			Help:    "Time from sending an epoch declaration to its answer or error.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 13),
		}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencegate_fence_transitions_total",
			Help: "Fence status transitions of this cluster.",
		}, []string{"from", "to"}),
		watchRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencegate_fence_watch_reconnects_total",
			Help: "Times the WatchFence subscription ended or failed and was opened again.",
		}),
		writeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencegate_fence_store_write_errors_total",
			Help: "Failed writes of data.fence into the policy store.",
		}),
		checkWaiters: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fencegate_fence_check_waiters",
			Help: "Callers waiting for the fence authority's first answer (they share one declaration).",
		}),
		epoch: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fencegate_fence_epoch",
			Help: "The epoch this cluster declares.",
		}),
		holder: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fencegate_fence_holder_epoch",
			Help: "The epoch of the cluster that holds the fence, labelled with its name, as this cluster last learned it; no series while no holder is known.",
		}, []string{"holder"}),
		token: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fencegate_fence_token",
			Help: "The fencing token of this cluster's grant while it holds the fence; 0 otherwise.",
		}),
		// No series before the first answer, so that an alert on its age
		// does not fire for every process that has just started (the fence
		// status says unknown meanwhile).
		lastAnswer: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fencegate_fence_last_answer_timestamp_seconds",
			Help: "When the last declaration that the fence authority answered (a grant or a fence refusal) was sent, in Unix time; no series before the first answer.",
		}, nil),
		refused: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fencegate_fence_refused",
			Help: refusedHelp,
		}, []string{"reason"}),
	}
	for _, s := range allStatuses {
		m.status.WithLabelValues(string(s))
	}
	for _, reason := range refusalReasons {
		m.refused.WithLabelValues(reason)
	}
	for _, k := range answerKinds {
		m.declarations.WithLabelValues(k.result())
	}
	if err := promreg.Register(reg, "fence agent", m.status, m.declarations, m.duration, m.transitions, m.watchRetries, m.writeErrors, m.checkWaiters, m.epoch, m.holder, m.token, m.lastAnswer, m.refused); err != nil {
		return nil, fmt.Errorf("one fence agent per registry: %w", err)
	}
	return m, nil
}

// setStatus makes s the one current status.
func (m *metrics) setStatus(s fencestate.Status) {
	for _, each := range allStatuses {
		v := 0.0
		if each == s {
			v = 1
		}
		m.status.WithLabelValues(string(each)).Set(v)
	}
}

// setFence exports what a state says about the fence beyond the status:
// this cluster's epoch, the holder, the token, a refusal that waits for an
// operator and when the authority last answered, so that a dashboard shows who holds the fence as each cluster
// sees it and an alert sees an authority that stopped answering. The agent
// calls it with its lock held, once per committed state.
func (m *metrics) setFence(s fencestate.State) {
	m.epoch.Set(float64(s.Cluster.Epoch))
	m.token.Set(float64(s.Token))
	for _, reason := range refusalReasons {
		v := 0.0
		if s.Reason == reason || s.EpochRefused != nil && s.EpochRefused.Reason == reason {
			v = 1
		}
		m.refused.WithLabelValues(reason).Set(v)
	}
	if s.LastSuccessNS != 0 {
		m.lastAnswer.WithLabelValues().Set(float64(s.LastSuccessNS) / float64(time.Second))
	}
	// One holder series at a time. The new one is set before the old one
	// goes, so that no scrape in between finds none.
	if s.Holder.Name != "" {
		m.holder.WithLabelValues(s.Holder.Name).Set(float64(s.Holder.Epoch))
	}
	if m.holderName != "" && m.holderName != s.Holder.Name {
		m.holder.DeleteLabelValues(m.holderName)
	}
	m.holderName = s.Holder.Name
}

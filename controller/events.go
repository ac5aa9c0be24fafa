package controller

import (
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/engine"
)

// eventRecorder records an Event on a Component when its fence condition
// changes, within a budget shared by all Components: a fence transition
// re-marks every Component at once, and the API server should get a trickle
// of Events, not a storm. Events over the budget are counted and dropped;
// the conditions themselves are always written.
type eventRecorder struct {
	recorder events.EventRecorder
	limiter  *rate.Limiter
	metrics  *metrics
}

func newEventRecorder(r events.EventRecorder, perSecond float64, burst int, m *metrics) *eventRecorder {
	return &eventRecorder{recorder: r, limiter: rate.NewLimiter(rate.Limit(perSecond), burst), metrics: m}
}

func (e *eventRecorder) fenceChanged(comp *fencegatev1alpha1.Component, decision engine.ReconcileDecision) {
	if !e.limiter.Allow() {
		e.metrics.eventsDropped.Inc()
		return
	}
	eventType, action := corev1.EventTypeNormal, "FenceRegained"
	if decision.Hold {
		eventType, action = corev1.EventTypeWarning, "FenceLost"
	}
	e.recorder.Eventf(comp, nil, eventType, decision.Reason, action, "%s", decision.Message)
}

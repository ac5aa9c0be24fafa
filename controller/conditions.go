package controller

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/fencestate"
)

// fenceReasons are the reasons this controller writes; a Ready condition with
// one of them was set by the fence, not by an actuator.
var fenceReasons = map[string]bool{
	fencegatev1alpha1.ReasonFenceHeld:             true,
	fencegatev1alpha1.ReasonClusterFenced:         true,
	fencegatev1alpha1.ReasonClusterEpochRegressed: true,
	fencegatev1alpha1.ReasonFenceAcquiring:        true,
	fencegatev1alpha1.ReasonFenceUnknown:          true,
}

// Desired returns the status that comp must have, given the policies'
// decision and the fence state, without touching anything else an actuator
// owns. It is a pure function: the same inputs give the same status, and a
// condition that keeps its status keeps its LastTransitionTime, so writing the
// result back is a no-op when nothing changed.
//
// While held: SourceConflict=True with the decision's reason, Ready=False,
// Stalled=True, no access endpoints. When the fence is held by this cluster:
// SourceConflict=False (FenceHeld), Stalled removed, and a Ready=False that the
// fence had set removed, so that the actuator decides readiness again.
func Desired(comp *fencegatev1alpha1.Component, decision engine.ReconcileDecision, fence fencestate.State, now time.Time) fencegatev1alpha1.ComponentStatus {
	status := *comp.Status.DeepCopy()
	status.ObservedGeneration = comp.Generation
	status.Fence = fenceStatus(comp.Status.Fence, fence, now)

	reason := decision.Reason
	if reason == "" {
		reason = fencegatev1alpha1.ReasonFenceUnknown
		if !decision.Hold {
			reason = fencegatev1alpha1.ReasonFenceHeld
		}
	}
	if decision.Hold {
		for _, c := range []metav1.Condition{
			{Type: fencegatev1alpha1.ConditionSourceConflict, Status: metav1.ConditionTrue},
			{Type: fencegatev1alpha1.ConditionReady, Status: metav1.ConditionFalse},
			{Type: fencegatev1alpha1.ConditionStalled, Status: metav1.ConditionTrue},
		} {
			c.Reason, c.Message, c.ObservedGeneration = reason, decision.Message, comp.Generation
			setCondition(&status.Conditions, c, now)
		}
		status.Access = nil
		return status
	}

	setCondition(&status.Conditions, metav1.Condition{
		Type:               fencegatev1alpha1.ConditionSourceConflict,
		Status:             metav1.ConditionFalse,
		Reason:             reason,
		Message:            decision.Message,
		ObservedGeneration: comp.Generation,
	}, now)
	meta.RemoveStatusCondition(&status.Conditions, fencegatev1alpha1.ConditionStalled)
	if ready := meta.FindStatusCondition(status.Conditions, fencegatev1alpha1.ConditionReady); ready != nil && fenceReasons[ready.Reason] {
		meta.RemoveStatusCondition(&status.Conditions, fencegatev1alpha1.ConditionReady)
	}
	return status
}

// setCondition is meta.SetStatusCondition with an injected clock.
func setCondition(conditions *[]metav1.Condition, c metav1.Condition, now time.Time) {
	c.LastTransitionTime = metav1.NewTime(now.Truncate(time.Second))
	meta.SetStatusCondition(conditions, c)
}

// fenceStatus is status.fence for the given fence state. Since moves only
// when the state does.
func fenceStatus(old *fencegatev1alpha1.FenceStatus, fence fencestate.State, now time.Time) *fencegatev1alpha1.FenceStatus {
	fs := &fencegatev1alpha1.FenceStatus{
		State: string(fence.Status),
		Epoch: int64(fence.Cluster.Epoch), //nolint:gosec // epochs are far below 2^63
		Token: int64(fence.Token),         //nolint:gosec // tokens are etcd revisions, far below 2^63
	}
	if fence.Holder.Name != "" {
		fs.Holder = fmt.Sprintf("%s@%d", fence.Holder.Name, fence.Holder.Epoch)
	}
	since := metav1.NewTime(now.Truncate(time.Second))
	if old != nil && old.State == fs.State && old.Since != nil {
		since = *old.Since
	}
	fs.Since = &since
	return fs
}

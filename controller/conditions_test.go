package controller

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/fencestate"
)

var (
	t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	t1 = t0.Add(time.Hour)

	activeFence = fencestate.State{
		Status:  fencestate.Active,
		Cluster: fencestate.Cluster{Name: "east", UID: "uid-east", Epoch: 7},
		Holder:  fencestate.Cluster{Name: "east", UID: "uid-east", Epoch: 7},
		Token:   42,
	}
	fencedFence = fencestate.State{
		Status:  fencestate.Fenced,
		Cluster: fencestate.Cluster{Name: "east", UID: "uid-east", Epoch: 7},
		Holder:  fencestate.Cluster{Name: "west", UID: "uid-west", Epoch: 8},
		Token:   57,
	}
	held = engine.ReconcileDecision{Hold: true, Reason: fencegatev1alpha1.ReasonClusterFenced, Message: "west holds the fence at epoch 8"}
	free = engine.ReconcileDecision{Reason: fencegatev1alpha1.ReasonFenceHeld, Message: "east holds the fence"}
)

func cond(typ string, status metav1.ConditionStatus, reason, message string, at time.Time) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: message, ObservedGeneration: 3, LastTransitionTime: metav1.NewTime(at)}
}

func component(status fencegatev1alpha1.ComponentStatus) *fencegatev1alpha1.Component {
	c := &fencegatev1alpha1.Component{Status: status}
	c.Name, c.Namespace, c.Generation = "billing", "default", 3
	return c
}

func fenceAt(state string, epoch int64, holder string, token int64, since time.Time) *fencegatev1alpha1.FenceStatus {
	s := metav1.NewTime(since)
	return &fencegatev1alpha1.FenceStatus{State: state, Epoch: epoch, Holder: holder, Token: token, Since: &s}
}

func TestDesired(t *testing.T) {
	heldStatus := fencegatev1alpha1.ComponentStatus{
		ObservedGeneration: 3,
		Conditions: []metav1.Condition{
			cond("SourceConflict", metav1.ConditionTrue, "ClusterFenced", held.Message, t0),
			cond("Ready", metav1.ConditionFalse, "ClusterFenced", held.Message, t0),
			cond("Stalled", metav1.ConditionTrue, "ClusterFenced", held.Message, t0),
		},
		Fence: fenceAt("fenced", 7, "west@8", 57, t0),
	}
	activeStatus := fencegatev1alpha1.ComponentStatus{
		ObservedGeneration: 3,
		Conditions:         []metav1.Condition{cond("SourceConflict", metav1.ConditionFalse, "FenceHeld", free.Message, t0)},
		Fence:              fenceAt("active", 7, "east@7", 42, t0),
	}
	access := []fencegatev1alpha1.AccessEndpoint{{Name: "api", URL: "https://billing.example.com"}}

	tests := map[string]struct {
		status   fencegatev1alpha1.ComponentStatus
		decision engine.ReconcileDecision
		fence    fencestate.State
		now      time.Time
		want     fencegatev1alpha1.ComponentStatus
	}{
		"new component while fenced gets the held conditions": {
			decision: held, fence: fencedFence, now: t0,
			want: heldStatus,
		},
		"held conditions clear the access endpoints": {
			status:   fencegatev1alpha1.ComponentStatus{Access: access},
			decision: held, fence: fencedFence, now: t0,
			want: heldStatus,
		},
		"unchanged held state keeps transition times and since": {
			status:   heldStatus,
			decision: held, fence: fencedFence, now: t1,
			want: heldStatus,
		},
		"fence regained: SourceConflict False, Stalled and the fence's Ready removed": {
			status:   heldStatus,
			decision: free, fence: activeFence, now: t1,
			want: fencegatev1alpha1.ComponentStatus{
				ObservedGeneration: 3,
				Conditions:         []metav1.Condition{cond("SourceConflict", metav1.ConditionFalse, "FenceHeld", free.Message, t1)},
				Fence:              fenceAt("active", 7, "east@7", 42, t1),
			},
		},
		"an actuator's Ready and access survive while the fence is held by this cluster": {
			status: fencegatev1alpha1.ComponentStatus{
				Access:     access,
				Conditions: []metav1.Condition{cond("Ready", metav1.ConditionTrue, "Deployed", "chart installed", t0)},
			},
			decision: free, fence: activeFence, now: t0,
			want: fencegatev1alpha1.ComponentStatus{
				ObservedGeneration: 3,
				Access:             access,
				Conditions: []metav1.Condition{
					cond("Ready", metav1.ConditionTrue, "Deployed", "chart installed", t0),
					cond("SourceConflict", metav1.ConditionFalse, "FenceHeld", free.Message, t0),
				},
				Fence: fenceAt("active", 7, "east@7", 42, t0),
			},
		},
		"unchanged active state is a no-op": {
			status:   activeStatus,
			decision: free, fence: activeFence, now: t1,
			want: activeStatus,
		},
		"a held decision without a reason reads as unknown": {
			decision: engine.ReconcileDecision{Hold: true, Message: "no answer"},
			fence:    fencestate.State{Status: fencestate.Unknown, Cluster: fencestate.Cluster{Name: "east", Epoch: 7}},
			now:      t0,
			want: fencegatev1alpha1.ComponentStatus{
				ObservedGeneration: 3,
				Conditions: []metav1.Condition{
					cond("SourceConflict", metav1.ConditionTrue, "FenceUnknown", "no answer", t0),
					cond("Ready", metav1.ConditionFalse, "FenceUnknown", "no answer", t0),
					cond("Stalled", metav1.ConditionTrue, "FenceUnknown", "no answer", t0),
				},
				Fence: fenceAt("unknown", 7, "", 0, t0),
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			comp := component(tc.status)
			got := Desired(comp, tc.decision, tc.fence, tc.now)
			if !equality.Semantic.DeepEqual(got, tc.want) {
				t.Errorf("Desired() mismatch (-want +got):\n%s", cmp.Diff(tc.want, got))
			}
			if !equality.Semantic.DeepEqual(comp.Status, tc.status) {
				t.Errorf("Desired() modified its input")
			}
		})
	}
}

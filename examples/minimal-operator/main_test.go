package main

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/fenceobject/membership"
	"github.com/fencegate/fencegate/gate"
	"github.com/fencegate/fencegate/test/cluster"
	"github.com/fencegate/fencegate/test/testrun"
)

// TestMinimalOperator: the operator on a real API server, with the Fence
// and the replica's Lease written as fencegate writes them. It keeps the
// ConfigMap of a Component while its cluster holds the fence, each write
// asserting the hold's token; it writes nothing while the cluster is
// fenced; and it catches up at once when the cluster holds the fence
// again, well before a held-back reconcile's requeue.
func TestMinimalOperator(t *testing.T) {
	cp := cluster.StartForTest(t, cluster.Options{Name: "minimal"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	c := cp.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: gate.DefaultNamespace}}); err != nil {
		t.Fatal(err)
	}
	lease := membership.NewLease(membership.Config{Client: c, Namespace: gate.DefaultNamespace, Domain: "default", Instance: "a",
		Duration: membership.DefaultDuration, Clock: clock.RealClock{}})
	fence := &fencegatev1alpha1.Fence{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if err := c.Create(ctx, fence); err != nil {
		t.Fatal(err)
	}
	// hold writes what fencegate writes when this cluster holds the fence
	// with token (held) or another cluster does (not held).
	hold := func(held bool, token int64) {
		t.Helper()
		cond := metav1.Condition{Type: fencegatev1alpha1.ConditionHolding, Status: metav1.ConditionTrue, Reason: fencegatev1alpha1.ReasonFenceHeld, Message: "this cluster holds the fence"}
		fence.Status.State, fence.Status.Token = "active", token
		if !held {
			cond = metav1.Condition{Type: fencegatev1alpha1.ConditionHolding, Status: metav1.ConditionFalse, Reason: fencegatev1alpha1.ReasonClusterFenced, Message: `cluster "west" holds the fence`}
			fence.Status.State = "fenced"
		}
		meta.SetStatusCondition(&fence.Status.Conditions, cond)
		if err := c.Status().Update(ctx, fence); err != nil {
			t.Fatal(err)
		}
		h := membership.Hold{}
		if held {
			h = membership.Hold{Token: token, ValidUntil: time.Now().Add(time.Hour)}
		}
		if err := lease.SetHold(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	hold(true, 7)

	mgr, err := ctrl.NewManager(cp.Config, ctrl.Options{Scheme: cp.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	if err != nil {
		t.Fatal(err)
	}
	g, err := setup(mgr, gate.Options{Domain: "default"})
	if err != nil {
		t.Fatal(err)
	}
	testrun.Start(t, ctx, "manager", mgr.Start)

	shop := &fencegatev1alpha1.Component{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "shop"},
		Spec: fencegatev1alpha1.ComponentSpec{Enabled: true, Chart: fencegatev1alpha1.ChartRef{Repository: "https://charts.example", Name: "shop"}}}
	if err := c.Create(ctx, shop); err != nil {
		t.Fatal(err)
	}
	// configMap waits until shop's ConfigMap names chart, written under
	// token, and fails after within.
	configMap := func(chart, token string, within time.Duration) {
		t.Helper()
		var cm corev1.ConfigMap
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
			err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "shop"}, &cm)
			return err == nil && cm.Data["chart"] == chart && cm.Annotations[gate.WriteTokenAnnotation] == token, client.IgnoreNotFound(err)
		})
		if err != nil {
			t.Fatalf("ConfigMap shop: data %v, annotations %v; want chart %s written under token %s", cm.Data, cm.Annotations, chart, token)
		}
	}
	configMap("shop", "7", 20*time.Second)

	hold(false, 8)
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		return !g.Hold(ctx, "default").Holding, nil
	}); err != nil {
		t.Fatal("the gate never saw the cluster fenced")
	}
	shop.Spec.Chart.Name = "shop-v2"
	if err := c.Update(ctx, shop); err != nil {
		t.Fatal(err)
	}
	// Long enough for the change to reach the operator, which must not act.
	time.Sleep(2 * time.Second)
	configMap("shop", "7", time.Second)

	hold(true, 9)
	configMap("shop-v2", "9", 10*time.Second)
}

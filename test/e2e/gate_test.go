package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/gate"
	"github.com/fencegate/fencegate/test/stack"
	"github.com/fencegate/fencegate/test/testrun"
)

// TestStaleWriteTokensAfterAFailback: through the real API server and
// fencegate's webhooks on two control planes, a write that asserts the
// fencing token it was decided under is admitted while that token is
// current (and the assertion is never stored), and denied with
// STALE_FENCING_TOKEN once the fence went to west and came back: the late
// commit of a writer that decided before the failover. A kubectl apply of
// the same object, which sends back the stored fencegate.dev/token and no
// assertion, is admitted. A gated reconciler on east, after the failback,
// writes under the new token.
func TestStaleWriteTokensAfterAFailback(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	s := stack.StartForTest(t, ctx, stack.Options{
		Clusters: []stack.ClusterSpec{{Name: "east", Epoch: 2}, {Name: "west", Epoch: 1}},
		// The hold the replicas publish must stay ahead of the gate's
		// second of clock skew between two publications (docs/design.md,
		// "The gate"): a 4 s lease leaves 2 s of validity, too little.
		LeaseTTL:      10 * time.Second,
		InstanceLease: 3 * time.Second,
		Say:           t.Logf,
	})
	east, west := s.Cluster("east"), s.Cluster("west")
	for _, c := range []*stack.Cluster{east, west} {
		waitFenceOf(t, ctx, c, "default", "enforced", time.Minute, func(f *fencegatev1alpha1.Fence) bool {
			return conditions(f) == map[bool]string{true: holdingEnforced, false: fencedEnforced}[c == east]
		})
	}
	first := east.TokenForTest(t, ctx, "default")

	// Decided and committed under the current token: admitted, stamped,
	// the assertion removed.
	if res, err := east.ControlPlane.Kubectl(ctx, assertingToken("ledger", first), "apply", "-f", "-"); err != nil || res.ExitCode != 0 {
		t.Fatalf("east: a write asserting the current token %d: %v %s", first, err, res.Stderr)
	}
	var stored fencegatev1alpha1.Component
	if err := east.ControlPlane.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "ledger"}, &stored); err != nil {
		t.Fatal(err)
	}
	if a := stored.Annotations; a[gate.WriteTokenAnnotation] != "" || a["fencegate.dev/token"] != strconv.FormatInt(first, 10) {
		t.Fatalf("the stored Component's annotations %v: want token %d and no %s", a, first, gate.WriteTokenAnnotation)
	}

	for _, to := range []struct{ to, from string }{{"west", "east"}, {"east", "west"}} {
		out, stderr, exit, err := s.Failover(ctx, "--to", to.to, "--from", to.from, "--wait", "--timeout", "1m")
		if err != nil || exit != 0 {
			t.Fatalf("failover to %s: exit %d %v\n%s\n%s", to.to, exit, err, out, stderr)
		}
	}
	waitFenceOf(t, ctx, east, "default", "held again", time.Minute, is(holdingEnforced, 0, 0))
	current := east.TokenForTest(t, ctx, "default")
	if current <= first {
		t.Fatalf("east holds the fence again with token %d, not above %d", current, first)
	}

	// The late commit of a write decided under the first hold.
	res, err := east.ControlPlane.Kubectl(ctx, assertingToken("ledger", first), "apply", "-f", "-")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{gate.StaleTokenReason, fmt.Sprintf("token %d", first), fmt.Sprintf("token %d", current)} {
		if res.ExitCode == 0 || !strings.Contains(res.Stderr, want) {
			t.Errorf("east after the failback: a write asserting token %d: exit %d, %s; want it denied, saying %q", first, res.ExitCode, res.Stderr, want)
		}
	}
	t.Logf("east after the failback (token %d), a write asserting token %d: %s", current, first, strings.TrimSpace(res.Stderr))
	late := &fencegatev1alpha1.Component{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "late", Annotations: map[string]string{gate.WriteTokenAnnotation: strconv.FormatInt(first, 10)}}}
	if err := east.ControlPlane.Client.Create(ctx, late); !gate.IsStaleToken(err) {
		t.Errorf("east after the failback: a create asserting token %d: %v; want a STALE_FENCING_TOKEN denial", first, err)
	}
	// A person's apply sends the stored token back, and asserts nothing.
	if res, err := east.ControlPlane.Kubectl(ctx, componentWith("ledger", map[string]string{"fencegate.dev/token": strconv.FormatInt(first, 10)}), "apply", "-f", "-"); err != nil || res.ExitCode != 0 {
		t.Errorf("east after the failback: an apply sending back the stored token %d: %v %s; want it admitted", first, err, res.Stderr)
	}

	// A gated reconciler on east writes under the token it holds now.
	mgr, err := ctrl.NewManager(east.ControlPlane.Config, ctrl.Options{
		Scheme: east.ControlPlane.Scheme, Logger: testr.New(t), Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	g, err := gate.New(mgr, gate.Options{Namespace: stack.Namespace})
	if err != nil {
		t.Fatal(err)
	}
	writes, err := g.Client(mgr.GetClient(), &fencegatev1alpha1.Component{})
	if err != nil {
		t.Fatal(err)
	}
	wrote := make(chan error, 1)
	r := g.Reconciler(&fencegatev1alpha1.Component{}, reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		c := &fencegatev1alpha1.Component{ObjectMeta: metav1.ObjectMeta{Namespace: req.Namespace, Name: req.Name}}
		err := writes.Create(ctx, c)
		wrote <- err
		return reconcile.Result{}, err
	}))
	testrun.Start(t, ctx, "manager", mgr.Start)
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return g.Hold(ctx, "default").Holding, nil
	}); err != nil {
		t.Fatalf("the gate on east never saw the hold; last %+v", g.Hold(ctx, "default"))
	}
	if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "default", Name: "gated"}}); err != nil {
		t.Fatalf("the gated reconcile on east: %v (its write: %v)", err, <-wrote)
	}
	if err := east.ControlPlane.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "gated"}, &stored); err != nil {
		t.Fatal(err)
	}
	if a := stored.Annotations; a[gate.WriteTokenAnnotation] != "" || a["fencegate.dev/token"] != strconv.FormatInt(current, 10) {
		t.Errorf("the gated write's stored annotations %v: want token %d and no %s", a, current, gate.WriteTokenAnnotation)
	}
}

// assertingToken is a Component of the default namespace whose write
// asserts token.
func assertingToken(name string, token int64) []byte {
	return componentWith(name, map[string]string{gate.WriteTokenAnnotation: strconv.FormatInt(token, 10)})
}

// componentWith is a Component of the default namespace with annotations.
func componentWith(name string, annotations map[string]string) []byte {
	var a []string
	for k, v := range annotations {
		a = append(a, fmt.Sprintf("%q:%q", k, v))
	}
	return fmt.Appendf(nil, `{"apiVersion":"components.fencegate.dev/v1alpha1","kind":"Component","metadata":{"name":%q,"namespace":"default","annotations":{%s}},"spec":{"enabled":true}}`,
		name, strings.Join(a, ","))
}

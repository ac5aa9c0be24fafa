package gate_test

import (
	"context"
	"errors"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/gate"
)

// actuator is an operator's own reconciler: it acts on each Component with
// a client whose writes the gate checks.
type actuator struct{ client.Client }

func (a *actuator) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var c fencegatev1alpha1.Component
	if err := a.Get(ctx, req.NamespacedName, &c); client.IgnoreNotFound(err) != nil {
		return reconcile.Result{}, err
	}
	if gate.LocalOnly(ctx) {
		// A deleted Component on a cluster that does not hold its fence:
		// tear down what this cluster installed, never what the holder
		// owns, and let the finalizer go.
		return reconcile.Result{}, nil
	}
	// Install, upgrade, publish status: every write of a Component carries
	// the token this reconcile began under, and fails with ErrFenced once
	// the cluster stops holding.
	err := a.Status().Update(ctx, &c)
	if errors.Is(err, gate.ErrFenced) || gate.IsStaleToken(err) {
		// The fence moved while this reconcile ran: stop; the gate
		// enqueues the Component again at the next transition.
		return reconcile.Result{}, nil
	}
	return reconcile.Result{}, err
}

// An operator that acts on Components only while its cluster holds their
// fence domain: one Complete call around the controller it already has
// names the Component once and adds the re-enqueue on transitions, the
// gated client it hands the reconciler, and the wrapped reconciler.
func Example() {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = fencegatev1alpha1.AddToScheme(scheme)
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{Scheme: scheme})
	if err != nil {
		os.Exit(1)
	}

	g, err := gate.New(mgr, gate.Options{Namespace: "fencegate"})
	if err != nil {
		os.Exit(1)
	}
	err = g.Complete(ctrl.NewControllerManagedBy(mgr), &fencegatev1alpha1.Component{},
		func(writes client.Client) reconcile.Reconciler { return &actuator{Client: writes} })
	if err != nil {
		os.Exit(1)
	}
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		os.Exit(1)
	}
}

// The three parts Complete adds, for a controller that needs them apart:
// the same object each time.
func ExampleGate_Reconciler() {
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{})
	if err != nil {
		os.Exit(1)
	}
	g, err := gate.New(mgr, gate.Options{})
	if err != nil {
		os.Exit(1)
	}
	writes, err := g.Client(mgr.GetClient(), &fencegatev1alpha1.Component{})
	if err != nil {
		os.Exit(1)
	}
	err = ctrl.NewControllerManagedBy(mgr).
		For(&fencegatev1alpha1.Component{}).
		WatchesRawSource(g.Source(&fencegatev1alpha1.Component{})).
		Complete(g.Reconciler(&fencegatev1alpha1.Component{}, &actuator{Client: writes}))
	if err != nil {
		os.Exit(1)
	}
}

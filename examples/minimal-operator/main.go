// Command minimal-operator is the smallest operator behind fencegate's
// gate: for each enabled Component it keeps a ConfigMap that records the
// chart to run, and it writes nothing while its cluster does not hold the
// Component's fence domain. The gate is the g.Complete call.
package main

import (
	"context"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/domain"
	"github.com/fencegate/fencegate/gate"
)

// operator writes through the client the gate hands it: writes of
// Components and ConfigMaps fail with gate.ErrFenced while the cluster
// does not hold the fence of the object's domain.
type operator struct{ client client.Client }

func (o *operator) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var c fencegatev1alpha1.Component
	if err := o.client.Get(ctx, req.NamespacedName, &c); err != nil || gate.LocalOnly(ctx) || !c.Spec.Enabled {
		// Gone, or deleted on a cluster that does not hold its fence: the
		// ConfigMap goes with its owner, and nothing acts beyond it.
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: ctrl.ObjectMeta{Namespace: c.Namespace, Name: c.Name}}
	_, err := controllerutil.CreateOrUpdate(ctx, o.client, cm, func() error {
		cm.Data = map[string]string{"repository": c.Spec.Chart.Repository, "chart": c.Spec.Chart.Name}
		if d, ok := c.Labels[domain.Label]; ok {
			// In the Component's fence domain, which the gate judges it by.
			cm.Labels = map[string]string{domain.Label: d}
		}
		return controllerutil.SetControllerReference(&c, cm, o.client.Scheme())
	})
	return reconcile.Result{}, err
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "minimal-operator:", err)
		os.Exit(1)
	}
}

func run() error {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := fencegatev1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	// The fence domain of objects that name none comes from FENCEGATE_DOMAIN,
	// fencegate's --domain; fencegate runs in namespace fencegate.
	if _, err := setup(mgr, gate.Options{}); err != nil {
		return err
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}

// setup adds the operator behind a gate of opts to mgr.
func setup(mgr ctrl.Manager, opts gate.Options) (*gate.Gate, error) {
	g, err := gate.New(mgr, opts)
	if err != nil {
		return nil, err
	}
	return g, g.Complete(ctrl.NewControllerManagedBy(mgr).Owns(&corev1.ConfigMap{}), &fencegatev1alpha1.Component{},
		func(writes client.Client) reconcile.Reconciler { return &operator{client: writes} },
		gate.AlsoGate(&corev1.ConfigMap{}))
}

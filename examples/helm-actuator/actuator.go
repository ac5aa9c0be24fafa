package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/kube"
	releasecommon "helm.sh/helm/v4/pkg/release/common"
	releasev1 "helm.sh/helm/v4/pkg/release/v1"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
	"helm.sh/helm/v4/pkg/storage/driver"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/yaml"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/gate"
)

const (
	// FieldManager owns the status fields the actuator publishes.
	FieldManager = "helm-actuator"
	// Finalizer keeps a Component until its release is uninstalled.
	Finalizer = "helm-actuator.fencegate.dev/release"
	// specLabel, on a release, is the digest of the chart and values it
	// was installed from: a release that has it is up to date.
	specLabel = "helm-actuator.fencegate.dev/spec"
	// ReasonInstalled and ReasonDisabled are the Ready condition's reasons.
	ReasonInstalled = "Installed"
	ReasonDisabled  = "Disabled"
)

// Options configure the actuator.
type Options struct {
	// FencegateNamespace is where fencegate runs (the gate reads its
	// replicas' Leases there).
	FencegateNamespace string
	// Concurrency is how many Components are reconciled at once.
	Concurrency int
	// Name names the controller in logs and metrics; "helm-actuator" when
	// empty. Names are unique per process.
	Name string
}

// Setup adds the actuator to mgr: a controller of Components behind the
// fence gate. The gate is these lines; the rest is the actuator's own.
func Setup(mgr ctrl.Manager, opts Options) error {
	g, err := gate.New(mgr, gate.Options{Namespace: opts.FencegateNamespace})
	if err != nil {
		return err
	}
	helm, err := newHelmClients(mgr.GetConfig())
	if err != nil {
		return err
	}
	name := opts.Name
	if name == "" {
		name = "helm-actuator"
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named(name).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(opts.Concurrency, 1)})
	return g.Complete(b, &fencegatev1alpha1.Component{},
		func(writes client.Client) reconcile.Reconciler {
			return &Actuator{client: writes, helm: helm, charts: newCharts()}
		},
		// fencegate's controller sets a Component's SourceConflict from
		// its policies; the gate must not write it too.
		gate.WithoutConditions())
}

// Actuator installs each Component's chart with the Helm SDK and publishes
// the release's Services as status.access. The gate calls it only while
// this cluster holds the Component's fence, or LocalOnly for a deletion.
type Actuator struct {
	client client.Client
	helm   *helmClients
	charts *charts
}

// Reconcile installs, upgrades or uninstalls the Component's release.
func (a *Actuator) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var c fencegatev1alpha1.Component
	if err := a.client.Get(ctx, req.NamespacedName, &c); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	cfg, err := a.helm.forReconcile(ctx, c.Namespace)
	if err != nil {
		return reconcile.Result{}, err
	}
	if !c.DeletionTimestamp.IsZero() {
		return fenced(a.teardown(ctx, cfg, &c))
	}
	if controllerutil.AddFinalizer(&c, Finalizer) {
		if err := a.client.Update(ctx, &c); err != nil {
			return fenced(err)
		}
	}
	var rel *releasev1.Release
	if c.Spec.Enabled {
		rel, err = a.install(ctx, cfg, &c)
	} else {
		err = uninstall(cfg, c.Name, false)
	}
	if err != nil {
		return fenced(err)
	}
	return fenced(a.publish(ctx, &c, rel))
}

// fenced ends a reconcile whose write the fence stopped without an error:
// the gate enqueues the Component again at the next transition.
func fenced(err error) (reconcile.Result, error) {
	if errors.Is(err, gate.ErrFenced) || gate.IsStaleToken(err) {
		return reconcile.Result{}, nil
	}
	return reconcile.Result{}, err
}

// teardown uninstalls a deleted Component's release and lets it go. On a
// cluster that does not hold the fence (LocalOnly), only this cluster's
// copy goes: the release's objects here, without its hooks, which may act
// beyond this cluster (a pre-delete hook that drops a database).
func (a *Actuator) teardown(ctx context.Context, cfg *action.Configuration, c *fencegatev1alpha1.Component) error {
	if !controllerutil.ContainsFinalizer(c, Finalizer) {
		return nil
	}
	if err := uninstall(cfg, c.Name, gate.LocalOnly(ctx)); err != nil {
		return err
	}
	controllerutil.RemoveFinalizer(c, Finalizer)
	return a.client.Update(ctx, c)
}

// install installs or upgrades the release to the Component's chart and
// values; a release already up to date is left alone.
func (a *Actuator) install(ctx context.Context, cfg *action.Configuration, c *fencegatev1alpha1.Component) (*releasev1.Release, error) {
	ch, err := a.charts.get(ctx, c.Spec.Chart)
	if err != nil {
		return nil, err
	}
	values := map[string]any{}
	if c.Spec.Values != nil {
		if err := json.Unmarshal(c.Spec.Values.Raw, &values); err != nil {
			return nil, fmt.Errorf("spec.values: %w", err)
		}
	}
	want := specDigest(ch.Metadata.Version, c.Spec.Values)
	last, err := lastRelease(cfg, c.Name)
	if err != nil {
		return nil, err
	}
	if last != nil && last.Labels[specLabel] == want && last.Info != nil && last.Info.Status == releasecommon.StatusDeployed {
		return last, nil
	}
	// No client-side OpenAPI validation: the API server validates what it
	// is sent, and fetching its schema on each release would cost the
	// new holder most of the second in which it is to install.
	labels := map[string]string{specLabel: want}
	var out any
	if last == nil {
		in := action.NewInstall(cfg)
		in.ReleaseName, in.Namespace, in.Labels, in.WaitStrategy = c.Name, c.Namespace, labels, kube.HookOnlyStrategy
		in.DisableOpenAPIValidation = true
		out, err = in.RunWithContext(ctx, ch, values)
	} else {
		up := action.NewUpgrade(cfg)
		up.Namespace, up.Labels, up.WaitStrategy = c.Namespace, labels, kube.HookOnlyStrategy
		up.DisableOpenAPIValidation = true
		out, err = up.RunWithContext(ctx, c.Name, ch, values)
	}
	if err != nil {
		return nil, fmt.Errorf("release %s/%s: %w", c.Namespace, c.Name, err)
	}
	return asRelease(out)
}

// uninstall removes the release, if there is one; without its hooks when
// only this cluster's copy may go.
func uninstall(cfg *action.Configuration, name string, localOnly bool) error {
	un := action.NewUninstall(cfg)
	un.IgnoreNotFound, un.DisableHooks, un.WaitStrategy = true, localOnly, kube.HookOnlyStrategy
	if _, err := un.Run(name); err != nil {
		return fmt.Errorf("uninstall release %s: %w", name, err)
	}
	return nil
}

// lastRelease is the release's latest revision; nil if it has none.
func lastRelease(cfg *action.Configuration, name string) (*releasev1.Release, error) {
	history, err := cfg.Releases.History(name)
	if errors.Is(err, driver.ErrReleaseNotFound) || len(history) == 0 {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("release %s: its history: %w", name, err)
	}
	var last *releasev1.Release
	for _, r := range history {
		rel, err := asRelease(r)
		if err != nil {
			return nil, err
		}
		if last == nil || rel.Version > last.Version {
			last = rel
		}
	}
	return last, nil
}

func asRelease(r any) (*releasev1.Release, error) {
	switch rel := r.(type) {
	case *releasev1.Release:
		return rel, nil
	case releasev1.Release:
		return &rel, nil
	}
	return nil, fmt.Errorf("a release of an unknown type %T", r)
}

// specDigest names what a release was installed from.
func specDigest(chartVersion string, values *apiextensionsv1.JSON) string {
	h := sha256.New()
	h.Write([]byte(chartVersion))
	h.Write([]byte{0})
	if values != nil {
		h.Write(values.Raw)
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// publish applies the Component's access endpoints and its Ready
// condition, unless they already say so.
func (a *Actuator) publish(ctx context.Context, c *fencegatev1alpha1.Component, rel *releasev1.Release) error {
	ready := metav1.Condition{Type: fencegatev1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: ReasonDisabled,
		Message: "spec.enabled is false: nothing is installed", ObservedGeneration: c.Generation}
	access := []fencegatev1alpha1.AccessEndpoint{}
	if rel != nil {
		ready.Status, ready.Reason = metav1.ConditionTrue, ReasonInstalled
		ready.Message = fmt.Sprintf("release %s revision %d of chart %s %s", rel.Name, rel.Version, rel.Chart.Metadata.Name, rel.Chart.Metadata.Version)
		access = accessOf(rel)
	}
	was := meta.FindStatusCondition(c.Status.Conditions, ready.Type)
	if was != nil && was.Status == ready.Status && was.Reason == ready.Reason && was.Message == ready.Message &&
		was.ObservedGeneration == ready.ObservedGeneration && slices.Equal(c.Status.Access, access) {
		return nil
	}
	ready.LastTransitionTime = metav1.Now()
	if was != nil && was.Status == ready.Status {
		ready.LastTransitionTime = was.LastTransitionTime
	}
	// An empty list, not an absent one: fencegate's controller applies
	// the whole status too, so a field this manager stops sending would
	// stay.
	data, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []metav1.Condition{ready}, "access": access}})
	u := &unstructured.Unstructured{}
	if err == nil {
		err = json.Unmarshal(data, &u.Object)
	}
	if err != nil {
		return fmt.Errorf("status of %s/%s: %w", c.Namespace, c.Name, err)
	}
	u.SetGroupVersionKind(fencegatev1alpha1.GroupVersion.WithKind("Component"))
	u.SetNamespace(c.Namespace)
	u.SetName(c.Name)
	return a.client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldManager), client.ForceOwnership)
}

// accessOf is an endpoint for each port of each Service of the release.
func accessOf(rel *releasev1.Release) []fencegatev1alpha1.AccessEndpoint {
	access := []fencegatev1alpha1.AccessEndpoint{}
	manifests := releaseutil.SplitManifests(rel.Manifest)
	for _, key := range slices.Sorted(maps.Keys(manifests)) {
		var svc struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Spec struct {
				Ports []struct {
					Name string `json:"name"`
					Port int32  `json:"port"`
				} `json:"ports"`
			} `json:"spec"`
		}
		if yaml.Unmarshal([]byte(manifests[key]), &svc) != nil || svc.Kind != "Service" {
			continue
		}
		for _, p := range svc.Spec.Ports {
			name := svc.Metadata.Name
			if p.Name != "" {
				name += "-" + p.Name
			}
			access = append(access, fencegatev1alpha1.AccessEndpoint{Name: name, URL: fmt.Sprintf("http://%s.%s.svc:%d", svc.Metadata.Name, rel.Namespace, p.Port)})
		}
	}
	return access
}

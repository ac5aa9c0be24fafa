package charts

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencegate/fencegate/test/cluster"
)

// Names of the webhooks of admission.kinds, beside the Components'
// validate.fencegate.dev and mutate.fencegate.dev.
const (
	validateKindsHook = "validate.kinds.fencegate.dev"
	mutateKindsHook   = "mutate.kinds.fencegate.dev"
)

// namespaceNameLabel is the label the API server sets on every Namespace to
// its name; the kinds' webhooks leave namespaces out by it.
const namespaceNameLabel = "kubernetes.io/metadata.name"

// fencedKind is an entry of admission.kinds.
type fencedKind struct {
	group, kind, resource string
}

// fencedKindRule is the webhooks' rule for a kind of admission.kinds: every
// operation the policies decide, its main resource only (never status: an
// actuator keeps reporting what it does), every version and scope.
func fencedKindRule(k fencedKind) admissionregistrationv1.RuleWithOperations {
	return admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete},
		Rule: admissionregistrationv1.Rule{
			APIGroups:   []string{k.group},
			APIVersions: []string{"*"},
			Resources:   []string{k.resource},
			Scope:       ptr.To(admissionregistrationv1.AllScopes),
		},
	}
}

// kindsSelector is the namespaceSelector of the kinds' webhooks: within
// the Components' webhooks' selector (webhook.namespaceSelector: its labels
// and expressions), every namespace but those excluded, by name.
func kindsSelector(within *metav1.LabelSelector, excluded ...string) *metav1.LabelSelector {
	s := &metav1.LabelSelector{}
	if within != nil {
		s = within.DeepCopy()
	}
	s.MatchExpressions = append(s.MatchExpressions, metav1.LabelSelectorRequirement{
		Key: namespaceNameLabel, Operator: metav1.LabelSelectorOpNotIn, Values: excluded,
	})
	return s
}

// excludedNamespaces splits a kinds' webhook's namespaceSelector into the
// namespaces its one NotIn expression on their name leaves out and the rest
// of the selector; ok is false without exactly one such expression.
func excludedNamespaces(s *metav1.LabelSelector) (excluded []string, rest *metav1.LabelSelector, ok bool) {
	if s == nil {
		return nil, nil, false
	}
	rest = s.DeepCopy()
	rest.MatchExpressions = nil
	found := 0
	for _, e := range s.MatchExpressions {
		if e.Key == namespaceNameLabel && e.Operator == metav1.LabelSelectorOpNotIn {
			excluded = e.Values
			found++
			continue
		}
		rest.MatchExpressions = append(rest.MatchExpressions, e)
	}
	return excluded, rest, found == 1
}

// rulesText prints webhook rules for a test's message (a rule's scope is a
// pointer).
func rulesText(rules []admissionregistrationv1.RuleWithOperations) string {
	var out []string
	for _, r := range rules {
		scope := "<nil>"
		if r.Scope != nil {
			scope = string(*r.Scope)
		}
		out = append(out, fmt.Sprintf("{operations %v apiGroups %q apiVersions %v resources %v scope %s}", r.Operations, r.APIGroups, r.APIVersions, r.Resources, scope))
	}
	return strings.Join(out, "\n")
}

// TestAdmissionKinds: admission.kinds reaches the policies as
// data.fencegate.config's fenced_kinds (group and kind only) and each
// webhook configuration as a second webhook (validate.kinds.fencegate.dev,
// mutate.kinds.fencegate.dev) with one rule per kind, set up as the
// Components' webhook but for a namespaceSelector that leaves out the
// release namespace and admission.excludeNamespaces (kube-system by
// default), so that fencegate can be upgraded and kube-system repaired on a
// fenced cluster or while no fencegate pod answers. The Components'
// webhooks stay as they are, and nothing else changes (no RBAC, no
// rollout). With no kinds the chart renders byte for byte as without the
// value, whatever excludeNamespaces says. The schema refuses an entry that
// is not {group, kind, resource}, naming it, Components, which are always
// fenced, and excludeNamespaces that are not distinct namespace names.
func TestAdmissionKinds(t *testing.T) {
	h := newHelm(t)
	ci := func(name string) []string { return []string{filepath.Join(h.chartDir(fencegateChart), "ci", name)} }
	defaults := ci("defaults-values.yaml")
	base := renderFencegate(t, h, defaults)
	kinds := func(json string) []string { return []string{"--set-json", "admission.kinds=" + json} }
	exclude := func(json string) []string { return []string{"--set-json", "admission.excludeNamespaces=" + json} }
	cronJobs := kinds(`[{"group": "batch", "kind": "CronJob", "resource": "cronjobs"}]`)

	tests := map[string]struct {
		values []string
		args   []string
		// want are parts of the refusal; empty: the chart renders, fencing
		// wantKinds beside Components outside the namespaces
		// wantExcluded (nil: the release namespace and kube-system).
		want         []string
		wantKinds    []fencedKind
		wantExcluded []string
	}{
		"defaults: Components only": {
			values: defaults,
		},
		"no kinds: Components only": {
			values: defaults,
			args:   kinds(`[]`),
		},
		"excluded namespaces without kinds: Components only": {
			values: defaults,
			args:   slices.Concat(kinds(`[]`), exclude(`["flux-system"]`)),
		},
		"ci/admission-kinds-values.yaml: CronJobs and Deployments": {
			values:    ci("admission-kinds-values.yaml"),
			wantKinds: []fencedKind{{"batch", "CronJob", "cronjobs"}, {"apps", "Deployment", "deployments"}},
		},
		"a core kind, its group left out": {
			values:    defaults,
			args:      kinds(`[{"kind": "ConfigMap", "resource": "configmaps"}]`),
			wantKinds: []fencedKind{{"", "ConfigMap", "configmaps"}},
		},
		"a core kind, its group empty, and a CRD's kind": {
			values:    defaults,
			args:      kinds(`[{"group": "", "kind": "ReplicationController", "resource": "replicationcontrollers"}, {"group": "kustomize.toolkit.fluxcd.io", "kind": "Kustomization", "resource": "kustomizations"}]`),
			wantKinds: []fencedKind{{"", "ReplicationController", "replicationcontrollers"}, {"kustomize.toolkit.fluxcd.io", "Kustomization", "kustomizations"}},
		},
		"with hold kinds, which need no admission rules of their own": {
			values:    ci("hold-values.yaml"),
			args:      cronJobs,
			wantKinds: []fencedKind{{"batch", "CronJob", "cronjobs"}},
		},
		"with the operator's own certificate: the kinds' webhooks carry its CA bundle too": {
			values:    ci("external-certs-values.yaml"),
			args:      cronJobs,
			wantKinds: []fencedKind{{"batch", "CronJob", "cronjobs"}},
		},
		"with cert-manager, whose cainjector fills every webhook's CA bundle": {
			values:    ci("cert-manager-values.yaml"),
			args:      cronJobs,
			wantKinds: []fencedKind{{"batch", "CronJob", "cronjobs"}},
		},
		"other excluded namespaces, in their order, instead of kube-system": {
			values:       ci("admission-kinds-values.yaml"),
			args:         exclude(`["flux-system", "argocd"]`),
			wantKinds:    []fencedKind{{"batch", "CronJob", "cronjobs"}, {"apps", "Deployment", "deployments"}},
			wantExcluded: []string{namespace, "flux-system", "argocd"},
		},
		"no excluded namespaces: the release namespace still is": {
			values:       defaults,
			args:         slices.Concat(cronJobs, exclude(`[]`)),
			wantKinds:    []fencedKind{{"batch", "CronJob", "cronjobs"}},
			wantExcluded: []string{namespace},
		},
		"the release namespace listed too: once": {
			values:       defaults,
			args:         slices.Concat(cronJobs, exclude(`["kube-system", "`+namespace+`"]`)),
			wantKinds:    []fencedKind{{"batch", "CronJob", "cronjobs"}},
			wantExcluded: []string{namespace, "kube-system"},
		},
		"within webhook.namespaceSelector and webhook.objectSelector": {
			values: defaults,
			args: slices.Concat(cronJobs,
				[]string{"--set-json", `webhook.namespaceSelector={"matchLabels": {"team": "payments"}, "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod"]}]}`},
				[]string{"--set-json", `webhook.objectSelector={"matchExpressions": [{"key": "fencegate.dev/skip", "operator": "DoesNotExist"}]}`}),
			wantKinds: []fencedKind{{"batch", "CronJob", "cronjobs"}},
		},
		"no resource": {
			values: defaults,
			args:   kinds(`[{"group": "batch", "kind": "CronJob"}]`),
			want:   []string{"at '/admission/kinds/0'", "missing property 'resource'"},
		},
		"no kind": {
			values: defaults,
			args:   kinds(`[{"group": "batch", "kind": "CronJob", "resource": "cronjobs"}, {"group": "apps", "resource": "deployments"}]`),
			want:   []string{"at '/admission/kinds/1'", "missing property 'kind'"},
		},
		"Components, which are always fenced": {
			values: defaults,
			args:   kinds(`[{"group": "components.fencegate.dev", "kind": "Component", "resource": "components"}]`),
			want:   []string{"at '/admission/kinds/0/kind'", "'not' failed"},
		},
		"an unknown key": {
			values: defaults,
			args:   kinds(`[{"group": "batch", "kind": "CronJob", "resource": "cronjobs"}, {"group": "apps", "version": "v1", "kind": "Deployment", "resource": "deployments"}]`),
			want:   []string{"at '/admission/kinds/1'", "additional properties 'version' not allowed"},
		},
		"the status subresource": {
			values: defaults,
			args:   kinds(`[{"group": "batch", "kind": "CronJob", "resource": "cronjobs/status"}]`),
			want:   []string{"at '/admission/kinds/0/resource'", "'cronjobs/status' does not match pattern"},
		},
		"a resource in capitals": {
			values: defaults,
			args:   kinds(`[{"group": "batch", "kind": "CronJob", "resource": "CronJobs"}]`),
			want:   []string{"at '/admission/kinds/0/resource'", "'CronJobs' does not match pattern"},
		},
		"a kind in lower case": {
			values: defaults,
			args:   kinds(`[{"group": "batch", "kind": "cronjob", "resource": "cronjobs"}]`),
			want:   []string{"at '/admission/kinds/0/kind'", "'cronjob' does not match pattern"},
		},
		"a group that is not a string": {
			values: defaults,
			args:   kinds(`[{"group": null, "kind": "ConfigMap", "resource": "configmaps"}]`),
			want:   []string{"at '/admission/kinds/0/group'", "want string"},
		},
		"a group with a version": {
			values: defaults,
			args:   kinds(`[{"group": "batch/v1", "kind": "CronJob", "resource": "cronjobs"}]`),
			want:   []string{"at '/admission/kinds/0/group'", "'batch/v1' does not match pattern"},
		},
		"a kind named twice": {
			values: defaults,
			args:   kinds(`[{"group": "batch", "kind": "CronJob", "resource": "cronjobs"}, {"group": "batch", "kind": "CronJob", "resource": "cronjobs"}]`),
			want:   []string{"at '/admission/kinds'", "are equal"},
		},
		"a kind as resource.group, as hold.kinds has them": {
			values: defaults,
			args:   kinds(`["cronjobs.batch"]`),
			want:   []string{"at '/admission/kinds/0'", "want object"},
		},
		"a misspelt admission value": {
			values: defaults,
			args:   []string{"--set-json", `admission.kind=[{"group": "batch", "kind": "CronJob", "resource": "cronjobs"}]`},
			want:   []string{"at '/admission'", "additional properties 'kind' not allowed"},
		},
		"an excluded namespace that is no namespace name": {
			values: defaults,
			args:   slices.Concat(cronJobs, exclude(`["kube-system", "Flux_System"]`)),
			want:   []string{"at '/admission/excludeNamespaces/1'", "'Flux_System' does not match pattern"},
		},
		"an excluded namespace name too long": {
			values: defaults,
			args:   slices.Concat(cronJobs, exclude(`["`+strings.Repeat("n", 64)+`"]`)),
			want:   []string{"at '/admission/excludeNamespaces/0'", "maxLength: got 64, want 63"},
		},
		"an excluded namespace named twice": {
			values: defaults,
			args:   slices.Concat(cronJobs, exclude(`["kube-system", "kube-system"]`)),
			want:   []string{"at '/admission/excludeNamespaces'", "are equal"},
		},
		"excluded namespaces as one string": {
			values: defaults,
			args:   []string{"--set", "admission.excludeNamespaces=kube-system"},
			want:   []string{"at '/admission/excludeNamespaces'", "want array"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if len(tc.want) > 0 {
				checkRefused(t, h, tc.values, tc.args, tc.want)
				return
			}

			r := renderFencegate(t, h, tc.values, tc.args...)
			checkFencegateInvariants(t, r)
			if len(tc.wantKinds) == 0 {
				// Byte for byte the defaults' render: the webhooks, the
				// config and everything else, so that an upgrade changes
				// nothing.
				if _, ok := r.config["fenced_kinds"]; ok {
					t.Errorf("config.yaml has fenced_kinds %v without admission kinds", r.config["fenced_kinds"])
				}
				if len(r.vwc.Webhooks) != 1 || len(r.mwc.Webhooks) != 1 {
					t.Errorf("%d validating and %d mutating webhooks without admission kinds, want the Components' alone", len(r.vwc.Webhooks), len(r.mwc.Webhooks))
				}
				if slices.Equal(tc.values, defaults) && r.manifest != base.manifest {
					t.Error("the chart renders differently with no admission kinds than without the value")
				}
				return
			}

			// The same values without admission kinds: what renders
			// otherwise must stay as it is.
			without := renderFencegate(t, h, tc.values, slices.Concat(tc.args, kinds(`[]`))...)

			var wantConfig []any
			for _, k := range tc.wantKinds {
				wantConfig = append(wantConfig, map[string]any{"group": k.group, "kind": k.kind})
			}
			if got := r.config["fenced_kinds"]; !reflect.DeepEqual(got, wantConfig) {
				t.Errorf("config.yaml fenced_kinds = %v, want %v (group and kind only)", got, wantConfig)
			}
			for key, value := range without.config {
				if !reflect.DeepEqual(r.config[key], value) {
					t.Errorf("config.yaml %s = %v, want it as without admission kinds, %v", key, r.config[key], value)
				}
			}

			var wantRules []admissionregistrationv1.RuleWithOperations
			for _, k := range tc.wantKinds {
				wantRules = append(wantRules, fencedKindRule(k))
			}
			excluded := tc.wantExcluded
			if excluded == nil {
				excluded = []string{namespace, "kube-system"}
			}
			// Each configuration: the Components' webhook exactly as
			// without admission kinds, then the kinds' own.
			if len(r.vwc.Webhooks) != 2 || len(r.mwc.Webhooks) != 2 {
				t.Fatalf("%d validating and %d mutating webhooks, want two each: the Components' and the kinds'", len(r.vwc.Webhooks), len(r.mwc.Webhooks))
			}
			if !reflect.DeepEqual(r.vwc.Webhooks[0], without.vwc.Webhooks[0]) || !reflect.DeepEqual(r.mwc.Webhooks[0], without.mwc.Webhooks[0]) {
				t.Errorf("the Components' webhooks differ from those without admission kinds; their rules are\n%s\nand\n%s",
					rulesText(slices.Concat(r.vwc.Webhooks[0].Rules, r.mwc.Webhooks[0].Rules)),
					rulesText(slices.Concat(without.vwc.Webhooks[0].Rules, without.mwc.Webhooks[0].Rules)))
			}
			validating, mutating := r.vwc.Webhooks[1], r.mwc.Webhooks[1]
			for _, c := range []struct {
				name, wantName string
				got            string
				rules          []admissionregistrationv1.RuleWithOperations
				selector       *metav1.LabelSelector
				components     *metav1.LabelSelector
			}{
				{"validating", validateKindsHook, validating.Name, validating.Rules, validating.NamespaceSelector, without.vwc.Webhooks[0].NamespaceSelector},
				{"mutating", mutateKindsHook, mutating.Name, mutating.Rules, mutating.NamespaceSelector, without.mwc.Webhooks[0].NamespaceSelector},
			} {
				if c.got != c.wantName {
					t.Errorf("the second %s webhook is %q, want %q", c.name, c.got, c.wantName)
				}
				if !reflect.DeepEqual(c.rules, wantRules) {
					t.Errorf("the %s kinds' webhook's rules are\n%s\nwant\n%s", c.name, rulesText(c.rules), rulesText(wantRules))
				}
				if want := kindsSelector(c.components, excluded...); !reflect.DeepEqual(c.selector, want) {
					t.Errorf("the %s kinds' webhook's namespaceSelector is %s, want %s", c.name, metav1.FormatLabelSelector(c.selector), metav1.FormatLabelSelector(want))
				}
			}
			// But for their name, rules and namespaceSelector, the kinds'
			// webhooks are the Components': the same service, path and CA
			// bundle, failure policy, timeout, object selector, ...
			validating.Name, validating.Rules, validating.NamespaceSelector = without.vwc.Webhooks[0].Name, without.vwc.Webhooks[0].Rules, without.vwc.Webhooks[0].NamespaceSelector
			mutating.Name, mutating.Rules, mutating.NamespaceSelector = without.mwc.Webhooks[0].Name, without.mwc.Webhooks[0].Rules, without.mwc.Webhooks[0].NamespaceSelector
			if !reflect.DeepEqual(validating, without.vwc.Webhooks[0]) || !reflect.DeepEqual(mutating, without.mwc.Webhooks[0]) {
				t.Error("the kinds' webhooks differ from the Components' beyond their name, rules and namespaceSelector")
			}

			// Nothing else: the same objects, no rollout (fencegate reloads
			// its config in place), and no RBAC, which admission needs none
			// of.
			if !slices.Equal(r.names(), without.names()) {
				t.Errorf("objects %v, want those without admission kinds %v", r.names(), without.names())
			}
			if !reflect.DeepEqual(r.deploy.Spec.Template, without.deploy.Spec.Template) {
				t.Error("the pod template differs from the one without admission kinds: the pods would roll")
			}
			if !reflect.DeepEqual(r.clusterRole.Rules, without.clusterRole.Rules) {
				t.Errorf("ClusterRole rules %v, want those without admission kinds %v", r.clusterRole.Rules, without.clusterRole.Rules)
			}
		})
	}
}

// testAdmissionKindsOnTheInstall upgrades the installed release to fence
// apps Deployments while no fencegate answers (the control plane has no
// nodes, so with failurePolicy Fail every call of the webhooks fails):
// fencegate's certificate manager injects its CA bundle into the kinds'
// webhooks too; a Deployment in namespace default is refused, one in
// kube-system is not, and neither is an upgrade that changes fencegate's
// own Deployment. It ends as it began, without admission kinds.
func testAdmissionKindsOnTheInstall(t *testing.T, h *helmTool, cp *cluster.ControlPlane) {
	ctx := t.Context()
	upgrade := func(args ...string) error {
		_, err := h.run(ctx, append([]string{"upgrade", release, h.chartDir(fencegateChart), "--namespace", namespace, "--reuse-values"}, args...)...)
		return err
	}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	// names reads both webhook configurations and names their webhooks.
	names := func() (validating, mutating []string) {
		t.Helper()
		for _, obj := range []client.Object{vwc, mwc} {
			if err := cp.Client.Get(ctx, client.ObjectKey{Name: fullname}, obj); err != nil {
				t.Fatal(err)
			}
		}
		for _, w := range vwc.Webhooks {
			validating = append(validating, w.Name)
		}
		for _, w := range mwc.Webhooks {
			mutating = append(mutating, w.Name)
		}
		return validating, mutating
	}

	if err := upgrade("--set-json", `admission.kinds=[{"group": "apps", "kind": "Deployment", "resource": "deployments"}]`); err != nil {
		t.Fatal(err)
	}
	defer func() {
		// Back without admission kinds, and to the chart's replicas: a
		// change of fencegate's Deployment, which the kinds' webhooks let
		// through too. The later steps run without them.
		if err := upgrade("--set-json", "admission.kinds=[]", "--set", "replicaCount=2"); err != nil {
			t.Errorf("upgrade back without admission kinds: %v", err)
			return
		}
		if validating, mutating := names(); len(validating) != 1 || len(mutating) != 1 {
			t.Errorf("without admission kinds the webhooks are %v and %v, want the Components' alone", validating, mutating)
		}
	}()
	validating, mutating := names()
	if want := []string{"validate.fencegate.dev", validateKindsHook}; !slices.Equal(validating, want) {
		t.Errorf("validating webhooks %v, want %v", validating, want)
	}
	if want := []string{"mutate.fencegate.dev", mutateKindsHook}; !slices.Equal(mutating, want) {
		t.Errorf("mutating webhooks %v, want %v", mutating, want)
	}

	// The upgrade left the Components' webhooks' bundles alone and added
	// webhooks without one; the certificate manager fills every webhook's.
	runTheChartsCertificateManager(t, cp)
	secret := &corev1.Secret{}
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: webhookSecret}, secret); err != nil {
		t.Fatal(err)
	}
	bundle := secret.Data["ca-bundle.crt"]
	names()
	carries := map[string]bool{}
	for _, w := range vwc.Webhooks {
		carries["validating "+w.Name] = len(bundle) > 0 && string(w.ClientConfig.CABundle) == string(bundle)
	}
	for _, w := range mwc.Webhooks {
		carries["mutating "+w.Name] = len(bundle) > 0 && string(w.ClientConfig.CABundle) == string(bundle)
	}
	for name, ok := range carries {
		if !ok {
			t.Errorf("the %s webhook does not carry the Secret's CA bundle", name)
		}
	}

	probe := func(ns string) *appsv1.Deployment {
		labels := map[string]string{"app": "kinds-probe"}
		return &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kinds-probe"},
			Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: "registry.k8s.io/pause:3.10"}}},
				},
			},
		}
	}
	// The API server takes the webhooks up through an informer: wait until
	// a Deployment in namespace default is refused, the kinds' webhook
	// being called and no fencegate answering.
	var refusal error
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		refusal = cp.Client.Create(ctx, probe(metav1.NamespaceDefault), client.DryRunAll)
		return refusal != nil, nil
	}); err != nil {
		t.Fatalf("a Deployment in namespace default is still admitted, with apps Deployment in admission.kinds and no fencegate answering: %v", err)
	}
	if want := fmt.Sprintf("failed calling webhook %q", mutateKindsHook); !strings.Contains(refusal.Error(), want) {
		t.Errorf("a Deployment in namespace default was refused with %v, want a message containing %s", refusal, want)
	}
	// kube-system (admission.excludeNamespaces) and the release namespace
	// are left out.
	if err := cp.Client.Create(ctx, probe(metav1.NamespaceSystem), client.DryRunAll); err != nil {
		t.Errorf("a Deployment in kube-system was refused: %v", err)
	}
	if err := upgrade("--set", "replicaCount=3"); err != nil {
		t.Fatalf("an upgrade that changes fencegate's Deployment, with apps Deployment in admission.kinds and no fencegate answering: %v", err)
	}
	deploy := &appsv1.Deployment{}
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: fullname}, deploy); err != nil {
		t.Fatal(err)
	}
	if got := ptr.Deref(deploy.Spec.Replicas, 0); got != 3 {
		t.Errorf("after the upgrade fencegate's Deployment has %d replicas, want 3", got)
	}
}

package charts

import (
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"
)

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
// data.fencegate.config's fenced_kinds (group and kind only) and both
// webhook configurations as one rule per kind after the Components' rules,
// which stay as they are; nothing else changes (no RBAC, no rollout). With
// no kinds the chart renders byte for byte as without the value. The schema
// refuses an entry that is not {group, kind, resource}, naming it, and
// Components, which are always fenced.
func TestAdmissionKinds(t *testing.T) {
	h := newHelm(t)
	ci := func(name string) []string { return []string{filepath.Join(h.chartDir(fencegateChart), "ci", name)} }
	defaults := ci("defaults-values.yaml")
	base := renderFencegate(t, h, defaults)
	kinds := func(json string) []string { return []string{"--set-json", "admission.kinds=" + json} }

	tests := map[string]struct {
		values []string
		args   []string
		// want are parts of the refusal; empty: the chart renders, fencing
		// wantKinds beside Components.
		want      []string
		wantKinds []fencedKind
	}{
		"defaults: Components only": {
			values: defaults,
		},
		"no kinds: Components only": {
			values: defaults,
			args:   kinds(`[]`),
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
			args:      kinds(`[{"group": "batch", "kind": "CronJob", "resource": "cronjobs"}]`),
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
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if len(tc.want) > 0 {
				_, err := h.template(t.Context(), fencegateChart, tc.values, tc.args...)
				if err == nil {
					t.Fatalf("helm template passed, want a refusal containing %q", tc.want)
				}
				for _, want := range tc.want {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("helm template error = %v, want one containing %q", err, want)
					}
				}
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
				if slices.Equal(tc.values, defaults) && r.manifest != base.manifest {
					t.Error("the chart renders differently with no admission kinds than without the value")
				}
				return
			}

			// The same values without admission kinds: what renders
			// otherwise must stay as it is.
			without := renderFencegate(t, h, tc.values, kinds(`[]`)...)

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

			var extra []admissionregistrationv1.RuleWithOperations
			for _, k := range tc.wantKinds {
				extra = append(extra, fencedKindRule(k))
			}
			// Both webhooks: the Components' rules as they were, then one
			// rule per kind; nothing else of them changes.
			if len(r.vwc.Webhooks) != 1 || len(r.mwc.Webhooks) != 1 {
				t.Fatalf("%d validating and %d mutating webhooks, want one each", len(r.vwc.Webhooks), len(r.mwc.Webhooks))
			}
			validating, mutating := r.vwc.Webhooks[0], r.mwc.Webhooks[0]
			for _, c := range []struct {
				name      string
				got, want []admissionregistrationv1.RuleWithOperations
			}{
				{"validating", validating.Rules, slices.Concat(without.vwc.Webhooks[0].Rules, extra)},
				{"mutating", mutating.Rules, slices.Concat(without.mwc.Webhooks[0].Rules, extra)},
			} {
				if !reflect.DeepEqual(c.got, c.want) {
					t.Errorf("the %s webhook's rules are\n%s\nwant\n%s", c.name, rulesText(c.got), rulesText(c.want))
				}
				for _, rule := range c.got {
					for _, res := range rule.Resources {
						if strings.HasSuffix(res, "/status") && res != "components/status" {
							t.Errorf("the %s webhook sees %s: actuators must keep writing the status of a fenced kind", c.name, res)
						}
					}
				}
			}
			validating.Rules, mutating.Rules = without.vwc.Webhooks[0].Rules, without.mwc.Webhooks[0].Rules
			if !reflect.DeepEqual(validating, without.vwc.Webhooks[0]) || !reflect.DeepEqual(mutating, without.mwc.Webhooks[0]) {
				t.Error("the webhooks differ from those without admission kinds beyond their rules")
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

package charts

import (
	"context"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fencegate/fencegate/test/cluster"
)

// holdVerbs are what the hold controller does with a held kind: it watches
// the objects (get, list, watch) and suspends and releases them by JSON
// patch.
var holdVerbs = []string{"get", "list", "watch", "patch"}

// TestHold: hold.kinds reaches fencegate run (FENCEGATE_HOLD_KINDS, with
// FENCEGATE_HOLD_QUIET_FOR) and the ClusterRole grants get, list, watch and
// patch on exactly those resources, split at the first dot into resource
// and API group; with no kinds nothing about holding renders at all, so an
// existing install does not change; and the chart refuses an entry that is
// not resource.group, naming it.
func TestHold(t *testing.T) {
	h := newHelm(t)
	ci := func(name string) []string { return []string{filepath.Join(h.chartDir(fencegateChart), "ci", name)} }
	defaults := ci("defaults-values.yaml")
	base := renderFencegate(t, h, defaults)
	rule := func(group string, resources ...string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{APIGroups: []string{group}, Resources: resources, Verbs: holdVerbs}
	}

	tests := map[string]struct {
		values []string
		args   []string
		// want is a part of the refusal; empty: the chart renders, with
		// wantKinds and wantQuietFor in the environment and the hold
		// rules wantRules, in API group order.
		want         []string
		wantKinds    string
		wantQuietFor string
		wantRules    []rbacv1.PolicyRule
	}{
		"defaults: nothing held": {
			values: defaults,
		},
		"no kinds, a quiet period: nothing held": {
			values: defaults,
			args:   []string{"--set-json", "hold.kinds=[]", "--set", "hold.quietFor=1m"},
		},
		"ci/hold-values.yaml: a core kind, Flux, KEDA and CronJobs": {
			values:       ci("hold-values.yaml"),
			wantKinds:    "cronjobs.batch,kustomizations.kustomize.toolkit.fluxcd.io,helmreleases.helm.toolkit.fluxcd.io,scaledobjects.keda.sh,replicationcontrollers",
			wantQuietFor: "30s",
			wantRules: []rbacv1.PolicyRule{
				rule("", "replicationcontrollers"),
				rule("batch", "cronjobs"),
				rule("helm.toolkit.fluxcd.io", "helmreleases"),
				rule("keda.sh", "scaledobjects"),
				rule("kustomize.toolkit.fluxcd.io", "kustomizations"),
			},
		},
		"one core kind, the default quiet period": {
			values:       defaults,
			args:         setValues("hold.kinds={configmaps}"),
			wantKinds:    "configmaps",
			wantQuietFor: "10s",
			wantRules:    []rbacv1.PolicyRule{rule("", "configmaps")},
		},
		"several resources of one group share a rule": {
			values:       defaults,
			args:         setValues("hold.kinds={scaledobjects.keda.sh,cronjobs.batch,scaledjobs.keda.sh}", "hold.quietFor=1m30s"),
			wantKinds:    "scaledobjects.keda.sh,cronjobs.batch,scaledjobs.keda.sh",
			wantQuietFor: "1m30s",
			wantRules:    []rbacv1.PolicyRule{rule("batch", "cronjobs"), rule("keda.sh", "scaledobjects", "scaledjobs")},
		},
		"Argo CD, Argo Workflows and Velero": {
			values:       defaults,
			args:         setValues("hold.kinds={applications.argoproj.io,cronworkflows.argoproj.io,schedules.velero.io}"),
			wantKinds:    "applications.argoproj.io,cronworkflows.argoproj.io,schedules.velero.io",
			wantQuietFor: "10s",
			wantRules:    []rbacv1.PolicyRule{rule("argoproj.io", "applications", "cronworkflows"), rule("velero.io", "schedules")},
		},
		"a Crossplane managed resource: the group is everything after the first dot": {
			values:       defaults,
			args:         setValues("hold.kinds={buckets.s3.aws.upbound.io}"),
			wantKinds:    "buckets.s3.aws.upbound.io",
			wantQuietFor: "10s",
			wantRules:    []rbacv1.PolicyRule{rule("s3.aws.upbound.io", "buckets")},
		},
		"a kind in capitals": {
			values: defaults,
			args:   setValues("hold.kinds={CronJobs}"),
			want:   []string{"at '/hold/kinds/0'", "'CronJobs' does not match pattern"},
		},
		"a kind written group/version style": {
			values: defaults,
			args:   setValues("hold.kinds={cronjobs.batch,cronjobs/batch}"),
			want:   []string{"at '/hold/kinds/1'", "'cronjobs/batch' does not match pattern"},
		},
		"a kind with a trailing dot": {
			values: defaults,
			args:   setValues("hold.kinds={cronjobs.batch.}"),
			want:   []string{"at '/hold/kinds/0'", "'cronjobs.batch.' does not match pattern"},
		},
		"a kind named twice": {
			values: defaults,
			args:   setValues("hold.kinds={cronjobs.batch,cronjobs.batch}"),
			want:   []string{"at '/hold/kinds'", "are equal"},
		},
		"kinds as one string": {
			values: defaults,
			args:   setValues("hold.kinds=cronjobs.batch"),
			want:   []string{"at '/hold/kinds'", "want array"},
		},
		"a quiet period that is not a duration": {
			values: defaults,
			args:   []string{"--set-string", "hold.quietFor=10"},
			want:   []string{"at '/hold/quietFor'", "'10' does not match pattern"},
		},
		"a quiet period of zero": {
			values: defaults,
			args:   setValues("hold.kinds={cronjobs.batch}", "hold.quietFor=0s"),
			want:   []string{"hold.quietFor (0s) must be above zero"},
		},
		"a misspelt hold value": {
			values: defaults,
			args:   setValues("hold.kind={cronjobs.batch}"),
			want:   []string{"at '/hold'", "additional properties 'kind' not allowed"},
		},
		"kinds set around the chart's RBAC": {
			values: defaults,
			args:   setValues("extraEnv[0].name=FENCEGATE_HOLD_KINDS", "extraEnv[0].value=cronjobs.batch"),
			want:   []string{"extraEnv sets FENCEGATE_HOLD_KINDS: set hold.kinds and hold.quietFor instead"},
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
			if tc.wantKinds == "" {
				// Nothing about holding: the same objects, pod template
				// and ClusterRole as without hold values.
				if !slices.Equal(r.names(), base.names()) {
					t.Errorf("objects %v, want those of the defaults %v", r.names(), base.names())
				}
				if !reflect.DeepEqual(r.deploy.Spec.Template, base.deploy.Spec.Template) {
					t.Error("the pod template differs from the defaults' without hold kinds: existing installs would roll")
				}
				if !reflect.DeepEqual(r.clusterRole.Rules, base.clusterRole.Rules) {
					t.Errorf("ClusterRole rules %v, want the defaults' %v", r.clusterRole.Rules, base.clusterRole.Rules)
				}
				if strings.Contains(r.manifest, "FENCEGATE_HOLD") || strings.Contains(r.manifest, "Holding actuators (hold.kinds") {
					t.Error("the manifest mentions holding without hold kinds")
				}
				return
			}

			wantEnv(t, r.container, map[string]string{
				"FENCEGATE_HOLD_KINDS":     tc.wantKinds,
				"FENCEGATE_HOLD_QUIET_FOR": tc.wantQuietFor,
			})
			// The hold rules are exactly what the ClusterRole grants beyond
			// the defaults', and it keeps every rule of the defaults.
			var added []rbacv1.PolicyRule
			for _, rule := range r.clusterRole.Rules {
				if !slices.ContainsFunc(base.clusterRole.Rules, func(b rbacv1.PolicyRule) bool { return reflect.DeepEqual(b, rule) }) {
					added = append(added, rule)
				}
			}
			if !reflect.DeepEqual(added, tc.wantRules) {
				t.Errorf("the ClusterRole adds the rules\n%v\nwant\n%v", added, tc.wantRules)
			}
			if got, want := len(r.clusterRole.Rules), len(base.clusterRole.Rules)+len(tc.wantRules); got != want {
				t.Errorf("the ClusterRole has %d rules, want the defaults' and the hold rules, %d", got, want)
			}
			// Every kind that reaches fencegate run is granted, and nothing
			// else: the rules name no objects (a held object is any of its
			// kind), only the resources and groups the kinds split into,
			// and no other verb.
			var granted []string
			for _, rule := range added {
				if !slices.Equal(rule.Verbs, holdVerbs) || len(rule.ResourceNames) > 0 || len(rule.APIGroups) != 1 {
					t.Errorf("hold rule %v: want the verbs %v on one API group, no names", rule, holdVerbs)
					continue
				}
				for _, res := range rule.Resources {
					granted = append(granted, strings.TrimSuffix(res+"."+rule.APIGroups[0], "."))
				}
			}
			kinds := strings.Split(env(r.container, "FENCEGATE_HOLD_KINDS"), ",")
			slices.Sort(granted)
			slices.Sort(kinds)
			if !slices.Equal(granted, kinds) {
				t.Errorf("the hold rules grant %v, want exactly the kinds %v", granted, kinds)
			}
			// Nothing else changes: the same objects as without holding.
			if !slices.Equal(r.names(), base.names()) {
				t.Errorf("objects %v, want those of the defaults %v", r.names(), base.names())
			}
		})
	}
}

// testHoldRole upgrades the installed release with hold kinds (a core one,
// a built-in group's and a CRD's that is not installed) and asks the API
// server what the chart's service account may do: watch and patch the held
// kinds' objects, and nothing else with them or with other kinds. The NOTES
// say what is held.
func testHoldRole(t *testing.T, h *helmTool, cp *cluster.ControlPlane) {
	ctx := t.Context()
	out, err := h.run(ctx, "upgrade", release, h.chartDir(fencegateChart), "--namespace", namespace,
		"--reuse-values", "--set", "hold.kinds={cronjobs.batch,replicationcontrollers,kustomizations.kustomize.toolkit.fluxcd.io}")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"fencegate holds (suspends) the objects of cronjobs.batch, replicationcontrollers, kustomizations.kustomize.toolkit.fluxcd.io",
		"`kubectl get fences` shows the HELD counts and the Quiesced condition",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("upgrade NOTES lack %q:\n%s", want, out)
		}
	}

	for _, tc := range []struct {
		verb, group, resource string
		want                  bool
	}{
		{"get", "batch", "cronjobs", true},
		{"list", "batch", "cronjobs", true},
		{"watch", "batch", "cronjobs", true},
		{"patch", "batch", "cronjobs", true},
		{"patch", "", "replicationcontrollers", true},
		{"watch", "", "replicationcontrollers", true},
		{"patch", "kustomize.toolkit.fluxcd.io", "kustomizations", true},
		{"list", "kustomize.toolkit.fluxcd.io", "kustomizations", true},
		{"update", "batch", "cronjobs", false},
		{"create", "batch", "cronjobs", false},
		{"delete", "batch", "cronjobs", false},
		{"patch", "batch", "jobs", false},
		{"patch", "", "configmaps", false},
		{"patch", "helm.toolkit.fluxcd.io", "helmreleases", false},
		{"patch", "kustomize.config.k8s.io", "kustomizations", false},
		{"patch", "batch", "replicationcontrollers", false},
	} {
		// In any namespace, as the API server authorizes the service
		// account; it sees the upgraded ClusterRole once its cache does.
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               selfUser,
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: tc.verb, Group: tc.group, Resource: tc.resource},
		}}
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			sar.Status = authorizationv1.SubjectAccessReviewStatus{}
			if err := cp.Client.Create(ctx, sar); err != nil {
				return false, err
			}
			return sar.Status.Allowed == tc.want, nil
		})
		if err != nil {
			t.Errorf("may the chart's service account %s %s in group %q? %v (%s), want %v: %v", tc.verb, tc.resource, tc.group, sar.Status.Allowed, sar.Status.Reason, tc.want, err)
		}
	}
}

// checkRefused renders the fencegate chart with values and args, and fails
// unless helm refuses it with an error containing each of want.
func checkRefused(t *testing.T, h *helmTool, values, args []string, want []string) {
	t.Helper()
	_, err := h.template(t.Context(), fencegateChart, values, args...)
	if err == nil {
		t.Fatalf("helm template passed, want a refusal containing %q", want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("helm template error = %v, want one containing %q", err, w)
		}
	}
}

package engine_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/engine/enginetest"
	"github.com/fencegate/fencegate/fencestate"
)

// Held kinds, as --hold-kinds names them.
var (
	cronJobs      = schema.GroupResource{Group: "batch", Resource: "cronjobs"}
	everyHeldKind = []schema.GroupResource{
		cronJobs,
		{Group: "kustomize.toolkit.fluxcd.io", Resource: "kustomizations"},
		{Group: "helm.toolkit.fluxcd.io", Resource: "helmreleases"},
		{Group: "argoproj.io", Resource: "applications"},
		{Group: "argoproj.io", Resource: "cronworkflows"},
		{Group: "keda.sh", Resource: "scaledobjects"},
		{Group: "keda.sh", Resource: "scaledjobs"},
		{Group: "velero.io", Resource: "schedules"},
		// A Crossplane managed resource, which the shipped rules know by
		// its shape alone.
		{Group: "s3.aws.upbound.io", Resource: "buckets"},
	}
)

// cronJobClash is a rule of an operator's own that conflicts with the
// shipped one for every CronJob: two values of rules["cronjob"].
const cronJobClash = `package fencegate.hold

rules["cronjob"] := {"fields": [{"path": ["spec", "suspend"], "value": false}], "activity": set()} if {
	obj.kind == "CronJob"
}
`

// fencedBucketClash conflicts with the shipped Crossplane rule for a
// managed resource, and only while the fence is fenced.
const fencedBucketClash = `package fencegate.hold

rules["crossplane-managed"] := {"fields": [], "activity": set()} if {
	is_object(obj.spec.forProvider)
	data.fence.status == "fenced"
}
`

// widgetClash conflicts with itself for objects of kind Widget, which no
// synthetic object of gizmos.example.io is.
const widgetClash = `package fencegate.hold

rules["widget"] := {"fields": [{"path": ["spec", "paused"], "value": true}], "activity": set()} if obj.kind == "Widget"

rules["widget"] := {"fields": [{"path": ["spec", "paused"], "value": 1}], "activity": set()} if obj.spec.paused == false
`

// policyDirWith is a copy of the shipped policies with files added
// (name → Rego); a file whose content is "" is removed instead.
func policyDirWith(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := enginetest.CopyPolicies(t)
	for name, src := range files {
		path := filepath.Join(dir, name)
		if src == "" {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			continue
		}
		writeFile(t, path, src)
	}
	return dir
}

// TestNewTriesTheHoldDecision checks that, with held kinds, engine.New
// refuses policies whose hold decision is missing or fails on an object of
// a held kind in some fence status, and that without held kinds the hold
// decision is neither required nor tried.
func TestNewTriesTheHoldDecision(t *testing.T) {
	tests := map[string]struct {
		files map[string]string
		kinds []schema.GroupResource
		// want are what the error says; none: New succeeds.
		want []string
	}{
		"the shipped policies hold every kind they know": {kinds: everyHeldKind},
		"a kind the shipped rules do not know": {
			kinds: []schema.GroupResource{{Group: "example.io", Resource: "gizmos"}, {Resource: "configmaps"}},
		},
		"no hold.rego while kinds are held": {
			files: map[string]string{"hold.rego": ""},
			kinds: []schema.GroupResource{cronJobs},
			want:  []string{"kinds are held here (cronjobs.batch)", "define no data.fencegate.hold.decision", "hold.rego"},
		},
		"no hold.rego and no kinds held": {files: map[string]string{"hold.rego": ""}},
		"a rule that conflicts with a shipped one": {
			files: map[string]string{"cronjob.rego": cronJobClash},
			kinds: []schema.GroupResource{cronJobs},
			want:  []string{"fail to decide the hold of a synthetic CronJob (cronjobs.batch)", "cronjob.rego:", "eval_conflict_error"},
		},
		"a conflicting rule of a kind not held": {
			files: map[string]string{"cronjob.rego": cronJobClash},
			kinds: []schema.GroupResource{{Group: "velero.io", Resource: "schedules"}},
		},
		"a conflicting rule and no kinds held": {files: map[string]string{"cronjob.rego": cronJobClash}},
		"a rule that conflicts while fenced": {
			files: map[string]string{"bucket.rego": fencedBucketClash},
			kinds: []schema.GroupResource{{Group: "s3.aws.upbound.io", Resource: "buckets"}},
			want:  []string{"a synthetic Bucket (buckets.s3.aws.upbound.io) shaped as a Crossplane managed resource while the fence is fenced", "bucket.rego:"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			opts := engine.Options{HoldKinds: tc.kinds}
			if tc.files != nil {
				opts.PolicyDir = policyDirWith(t, tc.files)
			}
			_, err := engine.New(opts)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("engine.New: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("engine.New put in force policies whose hold decision fails")
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("engine.New = %v\nwant it to say %q", err, want)
				}
			}
		})
	}
	_, err := engine.New(engine.Options{PolicyDir: policyDirWith(t, map[string]string{"hold.rego": ""}), HoldKinds: []schema.GroupResource{cronJobs}})
	if !errors.Is(err, engine.ErrNoHoldPolicy) {
		t.Errorf("engine.New without hold.rego = %v, want ErrNoHoldPolicy", err)
	}
}

// TestReloadTriesTheHoldDecision checks that a reload whose hold decision
// is missing or fails is refused while kinds are held, loudly (log,
// metric, policy status), and that the last good revision goes on holding;
// without held kinds, a policy set without hold.rego loads.
func TestReloadTriesTheHoldDecision(t *testing.T) {
	widget := map[string]any{
		"apiVersion": "example.io/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w", "namespace": "default"},
		"spec":     map[string]any{"paused": false},
	}
	tests := map[string]struct {
		kinds []schema.GroupResource
		// decided are objects the hold controller decided before the
		// reload.
		decided []map[string]any
		// files change the policy directory (name → Rego; "" removes).
		files map[string]string
		// want are what the refusal says; none: the reload succeeds.
		want []string
	}{
		"a rule that conflicts with a shipped one": {
			kinds: []schema.GroupResource{cronJobs},
			files: map[string]string{"cronjob.rego": cronJobClash},
			want:  []string{"a synthetic CronJob (cronjobs.batch)", "cronjob.rego:", "eval_conflict_error"},
		},
		"hold.rego removed while kinds are held": {
			kinds: []schema.GroupResource{cronJobs},
			files: map[string]string{"hold.rego": ""},
			want:  []string{"define no data.fencegate.hold.decision"},
		},
		"hold.rego removed and no kinds held": {files: map[string]string{"hold.rego": ""}},
		// The synthetic gizmo is a Gizmo: only the Widget the hold
		// controller decided shows the conflict.
		"a conflict on an object lately decided": {
			kinds:   []schema.GroupResource{cronJobs, {Group: "example.io", Resource: "gizmos"}},
			decided: []map[string]any{cronJob(false, 1), widget},
			files:   map[string]string{"widget.rego": widgetClash},
			want:    []string{"a recently decided example.io/v1 Widget", "widget.rego:"},
		},
		"the same conflict before any object was decided": {
			kinds: []schema.GroupResource{cronJobs, {Group: "example.io", Resource: "gizmos"}},
			files: map[string]string{"widget.rego": widgetClash},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := enginetest.CopyPolicies(t)
			reg := prometheus.NewPedanticRegistry()
			logs := &syncLog{}
			e := newEngine(t, engine.Options{PolicyDir: dir, HoldKinds: tc.kinds, Registerer: reg, Logger: funcr.New(logs.add, funcr.Options{})})
			writeFence(t, e, westFenced)
			for _, obj := range tc.decided {
				if _, err := e.Hold(context.Background(), "default", obj); err != nil {
					t.Fatalf("the shipped policies fail to decide %v: %v", obj["kind"], err)
				}
			}
			good := e.Revision()
			for name, src := range tc.files {
				if src == "" {
					if err := os.Remove(filepath.Join(dir, name)); err != nil {
						t.Fatal(err)
					}
					continue
				}
				writeFile(t, filepath.Join(dir, name), src)
			}
			err := e.Reload(context.Background())
			if len(tc.want) == 0 {
				if err != nil || e.Revision() == good {
					t.Fatalf("Reload = %v, revision %s (was %s); want the new revision in force", err, e.Revision(), good)
				}
				return
			}
			if err == nil {
				t.Fatal("Reload put in force a revision whose hold decision fails")
			}
			status := e.PolicyStatus()
			if e.Revision() != good || status.Revision != good {
				t.Errorf("revision in force %s (status %s), want the last good %s", e.Revision(), status.Revision, good)
			}
			if status.LastReload == nil || status.LastReload.Result != "error" {
				t.Fatalf("last reload = %+v, want the error", status.LastReload)
			}
			for _, want := range tc.want {
				if !strings.Contains(status.LastReload.Error, want) {
					t.Errorf("reload error %q does not say %q", status.LastReload.Error, want)
				}
			}
			if got := enginetest.Reloads(t, reg, "error"); got != 1 {
				t.Errorf("failed reloads = %v, want 1", got)
			}
			if !logs.contains(`"msg"="policy reload failed"`) {
				t.Errorf("the refusal is not logged: %q", logs.lines)
			}
			// The last good revision still holds this fenced cluster's
			// CronJobs.
			d, err := e.Hold(context.Background(), "default", cronJob(false, 0))
			if err != nil || !d.Hold || d.Kind != "cronjob" {
				t.Errorf("after the refused reload: Hold = %+v, %v; want the CronJob held", d, err)
			}
		})
	}
}

// TestHoldTrialCoversEveryStatus checks that the hold decision is tried
// in every fence status, the one in force included: a rule that fails in
// one status only is refused whichever status is in force.
func TestHoldTrialCoversEveryStatus(t *testing.T) {
	for _, status := range fencestate.Statuses() {
		t.Run(string(status), func(t *testing.T) {
			dir := enginetest.CopyPolicies(t)
			e := newEngine(t, engine.Options{PolicyDir: dir, HoldKinds: everyHeldKind})
			state := enginetest.Fence(status, "west", 3, "east", 7)
			if status == fencestate.Active {
				state = eastActive
			}
			writeFence(t, e, state)
			writeFile(t, filepath.Join(dir, "bucket.rego"), fencedBucketClash)
			err := e.Reload(context.Background())
			if err == nil || !strings.Contains(err.Error(), "while the fence is fenced") {
				t.Errorf("Reload with the fence %s = %v, want the refusal of the fenced status's conflict", status, err)
			}
		})
	}
}

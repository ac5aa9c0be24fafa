package hold

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"

	"github.com/fencegate/fencegate/engine"
)

// owned is a managedFields entry of manager that owns path.
func owned(manager string, path ...string) any {
	fields := map[string]any{}
	for i := len(path) - 1; i >= 0; i-- {
		fields = map[string]any{"f:" + path[i]: fields}
	}
	return map[string]any{"manager": manager, "operation": "Update", "fieldsV1": fields}
}

// object is a CronJob-like object with spec, annotations and managedFields.
func object(spec map[string]any, annotations map[string]any, managed ...any) map[string]any {
	meta := map[string]any{"name": "report", "namespace": "billing", "resourceVersion": "7"}
	if annotations != nil {
		meta["annotations"] = annotations
	}
	if managed != nil {
		meta["managedFields"] = managed
	}
	return map[string]any{"apiVersion": "batch/v1", "kind": "CronJob", "metadata": meta, "spec": spec}
}

var (
	suspend  = []engine.HoldField{{Path: []string{"spec", "suspend"}, Value: true}}
	paused   = []engine.HoldField{{Path: []string{"metadata", "annotations", "autoscaling.keda.sh/paused"}, Value: "true"}}
	disabled = []engine.HoldField{{Path: []string{"spec", "syncPolicy", "automated", "enabled"}, Value: false}}
)

// apply applies a step's patch to obj as the API server would (without
// managedFields, which the test sets itself).
func apply(t *testing.T, obj map[string]any, step Step) map[string]any {
	t.Helper()
	doc, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	ops, err := json.Marshal(step.Patch)
	if err != nil {
		t.Fatal(err)
	}
	// The API server applies JSON patches with this package.
	p, err := jsonpatch.DecodePatch(ops)
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.Apply(doc)
	if err != nil {
		t.Fatalf("patch %s does not apply: %v", ops, err)
	}
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestPlanHoldThenRelease(t *testing.T) {
	tests := map[string]struct {
		obj    map[string]any
		fields []engine.HoldField
	}{
		"a value that was there":                 {obj: object(map[string]any{"suspend": false}, nil), fields: suspend},
		"a field that was absent":                {obj: object(map[string]any{}, nil), fields: suspend},
		"an annotation without any annotations":  {obj: object(map[string]any{}, nil), fields: paused},
		"an annotation beside others":            {obj: object(map[string]any{}, map[string]any{"team": "billing"}), fields: paused},
		"an annotation that had another value":   {obj: object(map[string]any{}, map[string]any{"autoscaling.keda.sh/paused": "false"}), fields: paused},
		"a field whose parents are partly there": {obj: object(map[string]any{"syncPolicy": map[string]any{"automated": map[string]any{"prune": true}}}, nil), fields: disabled},
		"a field whose parents are all absent":   {obj: object(map[string]any{"source": "git"}, nil), fields: disabled},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			step, err := Plan(tc.obj, engine.HoldDecision{Kind: "k", Hold: true, Fields: tc.fields})
			if err != nil || step.Action != Holding {
				t.Fatalf("Plan(hold) = %v, %v: want a hold", step, err)
			}
			// A parent made for a field is made empty: the field is an
			// operation of its own.
			for i, op := range step.Patch {
				for _, later := range step.Patch[i+1:] {
					if strings.HasPrefix(later.Path, op.Path+"/") && !reflect.DeepEqual(op.Value, map[string]any{}) {
						t.Errorf("operation %d makes parent %s with %v, want {}", i, op.Path, op.Value)
					}
				}
			}
			held := apply(t, tc.obj, step)
			for _, f := range tc.fields {
				if v, _ := lookup(held, f.Path); !reflect.DeepEqual(v, f.Value) {
					t.Errorf("held %v = %v, want %v", f.Path, v, f.Value)
				}
			}
			if again, err := Plan(held, engine.HoldDecision{Kind: "k", Hold: true, Fields: tc.fields}); err != nil || again.Action != Nothing {
				t.Errorf("holding the held object again: %v, %v: want nothing", again, err)
			}
			// The patch was sent by FieldManager, which now owns the fields.
			for _, f := range tc.fields {
				setManaged(held, owned(FieldManager, f.Path...))
			}
			step, err = Plan(held, engine.HoldDecision{Kind: "k", Fields: tc.fields})
			if err != nil || step.Action != Releasing || len(step.Kept) > 0 {
				t.Fatalf("Plan(release) = %+v, %v: want a release that keeps nothing", step, err)
			}
			released := apply(t, held, step)
			delete(released["metadata"].(map[string]any), "managedFields")
			if a, ok := released["metadata"].(map[string]any)["annotations"].(map[string]any); ok && len(a) == 0 {
				// The API server drops an empty annotations map.
				delete(released["metadata"].(map[string]any), "annotations")
			}
			if !reflect.DeepEqual(released, tc.obj) {
				t.Errorf("released object differs from the one held:\n got %v\nwant %v", released, tc.obj)
			}
		})
	}
}

func setManaged(obj map[string]any, entries ...any) {
	obj["metadata"].(map[string]any)["managedFields"] = entries
}

func TestPlanNeverReleasesWhatIsNotFencegates(t *testing.T) {
	held := func(managed ...any) map[string]any {
		obj := object(map[string]any{"suspend": true}, nil, managed...)
		step, err := Plan(object(map[string]any{"suspend": false}, nil), engine.HoldDecision{Kind: "cronjob", Hold: true, Fields: suspend})
		if err != nil {
			t.Fatal(err)
		}
		// The record the hold wrote, on an object whose managedFields say
		// who owns spec.suspend now.
		for _, op := range step.Patch {
			if strings.HasSuffix(op.Path, "fencegate.dev~1held") {
				obj["metadata"].(map[string]any)["annotations"] = map[string]any{RecordAnnotation: op.Value}
			}
		}
		return obj
	}
	tests := map[string]struct {
		obj      map[string]any
		restored bool
	}{
		"fencegate alone owns it: restored": {
			obj: held(owned(FieldManager, "spec", "suspend")), restored: true,
		},
		"a person applied suspend: true too (shared ownership): kept": {
			obj: held(owned(FieldManager, "spec", "suspend"), owned("kubectl", "spec", "suspend")),
		},
		"another tool took it over: kept": {
			obj: held(owned("kubectl-edit", "spec", "suspend")),
		},
		"nobody's: kept": {
			obj: held(),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			step, err := Plan(tc.obj, engine.HoldDecision{Kind: "cronjob", Fields: suspend})
			if err != nil || step.Action != Releasing {
				t.Fatalf("Plan = %v, %v: want a release", step, err)
			}
			got := apply(t, tc.obj, step)
			want := !tc.restored
			if v, _ := lookup(got, []string{"spec", "suspend"}); v != want {
				t.Errorf("spec.suspend = %v after release, want %v", v, want)
			}
			if _, ok := lookup(got, []string{"metadata", "annotations", RecordAnnotation}); ok {
				t.Error("the record stays after release")
			}
			if kept := len(step.Kept) > 0; kept == tc.restored {
				t.Errorf("kept %v, want kept=%v", step.Kept, !tc.restored)
			}
		})
	}
}

func TestPlan(t *testing.T) {
	tests := map[string]struct {
		obj     map[string]any
		d       engine.HoldDecision
		action  Action
		wantErr string
	}{
		"already at the held value (a person suspended it): nothing, and no record": {
			obj: object(map[string]any{"suspend": true}, nil), d: engine.HoldDecision{Kind: "cronjob", Hold: true, Fields: suspend},
		},
		"released and never held: nothing": {
			obj: object(map[string]any{"suspend": false}, nil), d: engine.HoldDecision{Kind: "cronjob", Fields: suspend},
		},
		"of no held kind: nothing": {
			obj: object(map[string]any{}, nil), d: engine.HoldDecision{},
		},
		"of no held kind any more, with a record: released": {
			obj: object(map[string]any{"suspend": true}, map[string]any{RecordAnnotation: `{"fields":[{"path":["spec","suspend"],"value":true,"prior":false}]}`}, owned(FieldManager, "spec", "suspend")),
			d:   engine.HoldDecision{}, action: Releasing,
		},
		"reverted while held: held again": {
			obj: object(map[string]any{"suspend": false}, map[string]any{RecordAnnotation: `{"fields":[{"path":["spec","suspend"],"value":true,"prior":false}]}`}),
			d:   engine.HoldDecision{Kind: "cronjob", Hold: true, Fields: suspend}, action: Holding,
		},
		"a record fencegate did not write: refused": {
			obj: object(map[string]any{"suspend": true}, map[string]any{RecordAnnotation: `{"fields":[{"path":["status","x"],"value":true}]}`}),
			d:   engine.HoldDecision{Kind: "cronjob", Fields: suspend}, wantErr: "is not a record fencegate wrote",
		},
		"a record that is not JSON: refused": {
			obj: object(map[string]any{"suspend": true}, map[string]any{RecordAnnotation: `suspend`}),
			d:   engine.HoldDecision{Kind: "cronjob", Hold: true, Fields: suspend}, wantErr: "set the held fields back by hand",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			step, err := Plan(tc.obj, tc.d)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Plan error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || step.Action != tc.action {
				t.Fatalf("Plan = %+v, %v: want action %q", step, err, tc.action)
			}
		})
	}
}

func TestPlanKeepsTheFirstPriorValue(t *testing.T) {
	obj := object(map[string]any{"suspend": false}, nil)
	d := engine.HoldDecision{Kind: "cronjob", Hold: true, Fields: suspend}
	step, err := Plan(obj, d)
	if err != nil {
		t.Fatal(err)
	}
	held := apply(t, obj, step)
	// Something reverts it to false while held; the next hold must keep
	// prior false, not record its own held value as the prior one.
	held["spec"].(map[string]any)["suspend"] = false
	step, err = Plan(held, d)
	if err != nil || step.Action != Holding || len(step.Reverted) != 1 || step.Reverted[0] != "spec.suspend" {
		t.Fatalf("Plan = %+v, %v: want a hold of spec.suspend again, reverted", step, err)
	}
	again := apply(t, held, step)
	rec, err := recordOf(again)
	if err != nil || len(rec.Fields) != 1 || string(rec.Fields[0].Prior) != "false" {
		t.Fatalf("record after a second hold = %+v, %v: want one field with prior false", rec, err)
	}
}

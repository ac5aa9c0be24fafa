package hold

import (
	"encoding/json"
	"reflect"
	"slices"
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
		"two fields that share a parent the hold made": {
			obj: object(map[string]any{"source": "git"}, nil),
			fields: []engine.HoldField{
				{Path: []string{"spec", "syncPolicy", "automated", "enabled"}, Value: false},
				{Path: []string{"spec", "syncPolicy", "retry", "enabled"}, Value: false},
			},
		},
		"two fields that share a parent the hold made, one deeper": {
			obj: object(map[string]any{}, nil),
			fields: []engine.HoldField{
				{Path: []string{"spec", "a", "held"}, Value: true},
				{Path: []string{"spec", "a", "b", "c", "held"}, Value: true},
			},
		},
		"two annotations without any annotations": {
			obj: object(map[string]any{}, nil),
			fields: []engine.HoldField{
				{Path: []string{"metadata", "annotations", "autoscaling.keda.sh/paused"}, Value: "true"},
				{Path: []string{"metadata", "annotations", "example.com/paused"}, Value: "true"},
			},
		},
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
			var managed []any
			for _, f := range tc.fields {
				managed = append(managed, owned(FieldManager, f.Path...))
			}
			setManaged(held, managed...)
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
		refusal string
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
		"a record fencegate did not write, released: nothing, refused": {
			obj: object(map[string]any{"suspend": true}, map[string]any{RecordAnnotation: `{"fields":[{"path":["status","x"],"value":true}]}`}),
			d:   engine.HoldDecision{Kind: "cronjob", Fields: suspend}, refusal: "the fields it names: status.x",
		},
		"a record that is not JSON, released: nothing, refused": {
			obj: object(map[string]any{"suspend": true}, map[string]any{RecordAnnotation: `suspend`}),
			d:   engine.HoldDecision{Kind: "cronjob", Fields: suspend}, refusal: "as the fields it names cannot be read",
		},
		"a record that is not JSON, of no held kind any more: nothing, refused": {
			obj: object(map[string]any{"suspend": true}, map[string]any{RecordAnnotation: `suspend`}),
			d:   engine.HoldDecision{}, refusal: "remove the annotation",
		},
		"an unreadable record set aside, released, nothing recorded: nothing, refused": {
			obj: object(map[string]any{"suspend": true}, map[string]any{UnreadableAnnotation: `suspend`}),
			d:   engine.HoldDecision{Kind: "cronjob", Fields: suspend}, refusal: UnreadableAnnotation,
		},
		"a record that is not JSON on a held object: set aside, and nothing recorded": {
			obj: object(map[string]any{"suspend": true}, map[string]any{RecordAnnotation: `suspend`}),
			d:   engine.HoldDecision{Kind: "cronjob", Hold: true, Fields: suspend}, action: Holding,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			step, err := Plan(tc.obj, tc.d)
			if err != nil || step.Action != tc.action {
				t.Fatalf("Plan = %+v, %v: want action %q", step, err, tc.action)
			}
			if tc.refusal == "" && step.Refusal != "" || !strings.Contains(step.Refusal, tc.refusal) {
				t.Errorf("Plan refusal = %q, want one containing %q", step.Refusal, tc.refusal)
			}
			if step.Action == Nothing && step.Patch != nil {
				t.Errorf("Plan = %+v: a patch for nothing to do", step)
			}
			if step.Action != Nothing {
				// The object the step makes plans nothing, and keeps no
				// unreadable record where fencegate's goes.
				after := apply(t, tc.obj, step)
				if again, err := Plan(after, tc.d); err != nil || again.Action != Nothing {
					t.Errorf("Plan of the object the step makes = %+v, %v: want nothing", again, err)
				}
				if rec, bad, hasBad := recordOf(after); hasBad {
					t.Errorf("record after the step = %+v, unreadable %q", rec, bad)
				}
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
	rec, bad, _ := recordOf(again)
	if rec == nil || len(rec.Fields) != 1 || string(rec.Fields[0].Prior) != "false" {
		t.Fatalf("record after a second hold = %+v (unreadable %q): want one field with prior false", rec, bad)
	}
}

// TestPlanReleaseRemovesTheParentsItMadeWhateverIsLeft: the parent a hold
// made goes on release once it is empty, even when the field whose hold
// made it is no longer there to release (a person removed it while held).
func TestPlanReleaseRemovesTheParentsItMadeWhateverIsLeft(t *testing.T) {
	fields := []engine.HoldField{
		{Path: []string{"spec", "a", "x"}, Value: true},
		{Path: []string{"spec", "a", "y"}, Value: true},
	}
	tests := map[string]struct {
		remove []string // removed by a person while held
		kept   []string
	}{
		"both released":                       {},
		"the field that made the parent gone": {remove: []string{"x"}, kept: []string{"spec.a.x"}},
		"the field that came second gone":     {remove: []string{"y"}, kept: []string{"spec.a.y"}},
		"both gone, the parent left empty":    {remove: []string{"x", "y"}, kept: []string{"spec.a.x", "spec.a.y"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			obj := object(map[string]any{"schedule": "@daily"}, nil)
			d := engine.HoldDecision{Kind: "k", Hold: true, Fields: fields}
			step, err := Plan(obj, d)
			if err != nil {
				t.Fatal(err)
			}
			held := apply(t, obj, step)
			for _, f := range tc.remove {
				delete(held["spec"].(map[string]any)["a"].(map[string]any), f)
			}
			setManaged(held, owned(FieldManager, "spec", "a", "x"), owned(FieldManager, "spec", "a", "y"))
			d.Hold = false
			step, err = Plan(held, d)
			if err != nil || step.Action != Releasing || !reflect.DeepEqual(step.Kept, tc.kept) {
				t.Fatalf("Plan(release) = %+v, %v: want a release that keeps %v", step, err, tc.kept)
			}
			released := apply(t, held, step)
			if _, ok := lookup(released, []string{"spec", "a"}); ok {
				t.Errorf("spec.a, made by the hold, stays after release: %v", released["spec"])
			}
		})
	}
}

// TestPlanUnreadableRecordHolds: an object whose record fencegate cannot
// read is held as one without a record, the bad record set aside; the
// release leaves held whatever the bad record may claim until a person
// removed it, and then releases exactly what the hold recorded.
func TestPlanUnreadableRecordHolds(t *testing.T) {
	both := append(slices.Clone(suspend), paused...)
	tests := map[string]struct {
		obj    map[string]any
		fields []engine.HoldField
		// aside is what UnreadableAnnotation keeps after the hold.
		aside string
		// refused are the fields the release leaves held.
		refused []string
	}{
		"not JSON: every field stays held": {
			obj:    object(map[string]any{"suspend": false}, map[string]any{RecordAnnotation: "suspend"}),
			fields: suspend, aside: "suspend", refused: []string{"spec.suspend"},
		},
		"an empty value: every field stays held": {
			obj:    object(map[string]any{"suspend": false}, map[string]any{RecordAnnotation: ""}),
			fields: suspend, aside: "", refused: []string{"spec.suspend"},
		},
		"a path outside spec and metadata: what it names stays held": {
			obj: object(map[string]any{"suspend": false}, map[string]any{
				RecordAnnotation: `{"fields":[{"path":["spec","suspend"],"value":true,"prior":false},{"path":["status","active"],"value":[]}]}`,
			}),
			fields: both, aside: `{"fields":[{"path":["spec","suspend"],"value":true,"prior":false},{"path":["status","active"],"value":[]}]}`,
			refused: []string{"spec.suspend"},
		},
		"a parent of the held field named: it stays held": {
			obj:    object(map[string]any{"suspend": false}, map[string]any{RecordAnnotation: `{"fields":[{"path":["spec"],"value":{}}]}`}),
			fields: both, aside: `{"fields":[{"path":["spec"],"value":{}}]}`, refused: []string{"spec.suspend"},
		},
		"naming other fields only: the held ones are released": {
			obj:    object(map[string]any{"suspend": false}, map[string]any{RecordAnnotation: `{"fields":[{"path":["status","x"],"value":1}]}`}),
			fields: suspend, aside: `{"fields":[{"path":["status","x"],"value":1}]}`,
		},
		"an empty path: what it names is not known, every field stays held": {
			obj:    object(map[string]any{"suspend": false}, map[string]any{RecordAnnotation: `{"fields":[{"path":[],"value":true}]}`}),
			fields: both, aside: `{"fields":[{"path":[],"value":true}]}`, refused: []string{"spec.suspend", "metadata.annotations[autoscaling.keda.sh/paused]"},
		},
		"an earlier unreadable record kept aside: the new one is dropped": {
			obj:    object(map[string]any{"suspend": false}, map[string]any{RecordAnnotation: "second", UnreadableAnnotation: "first"}),
			fields: suspend, aside: "first", refused: []string{"spec.suspend"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d := engine.HoldDecision{Kind: "k", Hold: true, Fields: tc.fields}
			step, err := Plan(tc.obj, d)
			if err != nil || step.Action != Holding || step.SetAside == "" {
				t.Fatalf("Plan(hold) = %+v, %v: want a hold that sets the record aside", step, err)
			}
			held := apply(t, tc.obj, step)
			for _, f := range tc.fields {
				if v, _ := lookup(held, f.Path); !reflect.DeepEqual(v, f.Value) {
					t.Errorf("held %v = %v, want %v", f.Path, v, f.Value)
				}
			}
			if got, ok := annotation(held, UnreadableAnnotation); !ok || got != tc.aside {
				t.Errorf("%s = %q (%v) after the hold, want %q", UnreadableAnnotation, got, ok, tc.aside)
			}
			if rec, bad, hasBad := recordOf(held); rec == nil || hasBad || len(rec.Fields) != len(tc.fields) {
				t.Errorf("record after the hold = %+v (unreadable %q): want one of fencegate's, of %d fields", rec, bad, len(tc.fields))
			}
			if again, err := Plan(held, d); err != nil || again.Action != Nothing {
				t.Errorf("holding the held object again: %+v, %v: want nothing", again, err)
			}

			var managed []any
			for _, f := range tc.fields {
				managed = append(managed, owned(FieldManager, f.Path...))
			}
			setManaged(held, managed...)
			d.Hold = false
			step, err = Plan(held, d)
			if err != nil || step.Refusal == "" || !strings.Contains(step.Refusal, "remove the annotation") || !reflect.DeepEqual(step.Refused, tc.refused) {
				t.Fatalf("Plan(release) = %+v, %v: want a release refused for %v", step, err, tc.refused)
			}
			released := held
			if step.Action != Nothing {
				released = apply(t, held, step)
			}
			for _, f := range tc.fields {
				got, _ := lookup(released, f.Path)
				want, _ := lookup(tc.obj, f.Path)
				if slices.Contains(tc.refused, pathText(f.Path)) {
					want = f.Value
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s = %v after the refused release, want %v", pathText(f.Path), got, want)
				}
			}
			if again, err := Plan(released, d); err != nil || again.Action != Nothing || again.Refusal == "" {
				t.Errorf("releasing again: %+v, %v: want nothing, still refused", again, err)
			}

			// A person sets the fields right and removes the annotation:
			// what the hold recorded is released.
			delete(released["metadata"].(map[string]any)["annotations"].(map[string]any), UnreadableAnnotation)
			step, err = Plan(released, d)
			if len(tc.refused) == 0 {
				if err != nil || step.Action != Nothing || step.Refusal != "" {
					t.Fatalf("Plan(release) without the unreadable record = %+v, %v: want nothing left", step, err)
				}
				return
			}
			if err != nil || step.Action != Releasing || step.Refusal != "" || len(step.Kept) > 0 {
				t.Fatalf("Plan(release) without the unreadable record = %+v, %v: want a release", step, err)
			}
			final := apply(t, released, step)
			for _, f := range tc.fields {
				got, _ := lookup(final, f.Path)
				if want, _ := lookup(tc.obj, f.Path); !reflect.DeepEqual(got, want) {
					t.Errorf("%s = %v after the release, want %v as before the hold", pathText(f.Path), got, want)
				}
			}
			if _, ok := annotation(final, RecordAnnotation); ok {
				t.Error("the record stays after the release")
			}
		})
	}
}

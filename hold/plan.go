package hold

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/fencegate/fencegate/engine"
)

// RecordAnnotation keeps, on a held object, what holding changed: each
// field's path, held value and prior value, so that release sets back
// exactly what was there.
const RecordAnnotation = "fencegate.dev/held"

// FieldManager is the field manager of every hold and release: a field it
// is the sole owner of, at its held value, is fencegate's to release.
const FieldManager = "fencegate-hold"

// Record is the content of RecordAnnotation.
type Record struct {
	// Fields are the fields holding set, in the order it set them.
	Fields []RecordedField `json:"fields"`
}

// RecordedField is one field that holding set.
type RecordedField struct {
	// Path is the field's path from the object's root.
	Path []string `json:"path"`
	// Value is the held value holding set.
	Value json.RawMessage `json:"value"`
	// Prior is the value the field had before; absent when the field was
	// absent.
	Prior json.RawMessage `json:"prior,omitempty"`
	// Created counts the field's parents that were absent and that
	// holding made (empty objects): release removes those it finds empty.
	Created int `json:"created,omitempty"`
}

// Op is one JSON patch (RFC 6902) operation.
type Op struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// Action says what a Plan does.
type Action string

// The actions of a plan.
const (
	// Nothing: the object is as the decision wants it.
	Nothing Action = ""
	// Holding sets fields to their held values.
	Holding Action = "hold"
	// Releasing sets back the recorded prior values.
	Releasing Action = "release"
)

// Step is what to do to one object.
type Step struct {
	Action Action
	// Patch is the JSON patch that does it; it first tests the object's
	// resourceVersion, so that it applies to the object it was planned
	// from only.
	Patch []Op
	// Kept names the fields a release leaves as they are, because a person
	// or another tool set or owns them.
	Kept []string
	// Reverted names the fields a hold sets again: they were held, and
	// something (a parent applying its declared state, a person) set them
	// back while the object was held.
	Reverted []string
}

// Plan returns the step that brings obj (an object as the API server
// returns it) in line with decision d. It is pure: the same object and
// decision give the same step, and the object the step makes plans
// Nothing.
//
//   - Holding (d.Hold): every field not at its held value is set, and the
//     record gains its prior value, unless it records one already (a field
//     reverted while held is held again, and release still restores the
//     first prior value).
//   - Releasing (not d.Hold, a record present): every recorded field at
//     its held value whose sole owner is FieldManager is set back to its
//     prior value (removed when it was absent, with the parents holding
//     made that are left empty); the others are kept. The record goes.
func Plan(obj map[string]any, d engine.HoldDecision) (Step, error) {
	rec, err := recordOf(obj)
	if err != nil {
		return Step{}, err
	}
	p := newPatcher(obj)
	if d.Hold {
		return p.hold(rec, d.Fields)
	}
	if rec == nil {
		return Step{}, nil
	}
	return p.release(rec)
}

// recordOf reads the object's record; nil when it has none.
func recordOf(obj map[string]any) (*Record, error) {
	raw, ok := lookup(obj, []string{"metadata", "annotations", RecordAnnotation})
	if !ok {
		return nil, nil
	}
	text, ok := raw.(string)
	var rec Record
	if ok {
		err := json.Unmarshal([]byte(text), &rec)
		ok = err == nil && rec.valid()
	}
	if !ok {
		return nil, fmt.Errorf("annotation %s is not a record fencegate wrote (%.80q): the prior values of what was held are unknown, so nothing is held or released; "+
			"set the held fields back by hand and remove the annotation", RecordAnnotation, fmt.Sprint(raw))
	}
	return &rec, nil
}

// valid reports whether every entry names a path under spec or metadata
// and a held value.
func (r *Record) valid() bool {
	for _, f := range r.Fields {
		if len(f.Path) < 2 || (f.Path[0] != "spec" && f.Path[0] != "metadata") || len(f.Value) == 0 || f.Created < 0 || f.Created > len(f.Path)-1 {
			return false
		}
	}
	return true
}

// field returns the recorded entry for path, or nil.
func (r *Record) field(path []string) *RecordedField {
	for i := range r.Fields {
		if slices.Equal(r.Fields[i].Path, path) {
			return &r.Fields[i]
		}
	}
	return nil
}

func (p *patcher) hold(rec *Record, fields []engine.HoldField) (Step, error) {
	if rec == nil {
		rec = &Record{}
	}
	changed := false
	var reverted []string
	for _, f := range fields {
		held, err := json.Marshal(f.Value)
		if err != nil {
			return Step{}, fmt.Errorf("held value of %s: %w", pathText(f.Path), err)
		}
		current, present := lookup(p.obj, f.Path)
		if present && sameJSON(current, held) {
			continue
		}
		if rec.field(f.Path) != nil {
			reverted = append(reverted, pathText(f.Path))
		} else {
			entry := RecordedField{Path: f.Path, Value: held}
			if present {
				if entry.Prior, err = json.Marshal(current); err != nil {
					return Step{}, fmt.Errorf("prior value of %s: %w", pathText(f.Path), err)
				}
			}
			entry.Created = p.absentParents(f.Path)
			rec.Fields = append(rec.Fields, entry)
		}
		p.set(f.Path, json.RawMessage(held))
		changed = true
	}
	if !changed {
		return Step{}, nil
	}
	if err := p.setRecord(rec); err != nil {
		return Step{}, err
	}
	return Step{Action: Holding, Patch: p.ops, Reverted: reverted}, nil
}

func (p *patcher) release(rec *Record) (Step, error) {
	p.remove([]string{"metadata", "annotations", RecordAnnotation})
	var kept []string
	for _, f := range rec.Fields {
		current, present := lookup(p.obj, f.Path)
		if !present || !sameJSON(current, f.Value) || !soleOwner(p.obj, f.Path, FieldManager) {
			kept = append(kept, pathText(f.Path))
			continue
		}
		if f.Prior != nil {
			p.set(f.Path, f.Prior)
			continue
		}
		p.remove(f.Path)
		for n := 1; n <= f.Created; n++ {
			parent := f.Path[:len(f.Path)-n]
			if m, ok := lookupObject(p.obj, parent); !ok || len(m) > 0 {
				break
			}
			p.remove(parent)
		}
	}
	return Step{Action: Releasing, Patch: p.ops, Kept: kept}, nil
}

// sameJSON reports whether the decoded value v encodes as want does.
func sameJSON(v any, want []byte) bool {
	got, err := json.Marshal(v)
	if err != nil {
		return false
	}
	var a, b any
	if json.Unmarshal(got, &a) != nil || json.Unmarshal(want, &b) != nil {
		return false
	}
	ga, _ := json.Marshal(a)
	gb, _ := json.Marshal(b)
	return bytes.Equal(ga, gb)
}

// pathText renders a path for people: spec.suspend,
// metadata.annotations[autoscaling.keda.sh/paused].
func pathText(path []string) string {
	var b strings.Builder
	for i, s := range path {
		switch {
		case i == 0:
			b.WriteString(s)
		case strings.ContainsAny(s, "./"):
			fmt.Fprintf(&b, "[%s]", s)
		default:
			b.WriteString("." + s)
		}
	}
	return b.String()
}

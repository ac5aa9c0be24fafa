package hold

import (
	"bytes"
	"cmp"
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

// UnreadableAnnotation keeps a RecordAnnotation value that is not a record
// fencegate wrote (not JSON, a path outside spec and metadata), set aside
// by the hold that found it. Bad input must never unhold: the object is
// held as if it had no record, and no release sets back what the
// unreadable record may claim until a person removed this annotation.
const UnreadableAnnotation = "fencegate.dev/held-unreadable"

var (
	recordPath     = []string{"metadata", "annotations", RecordAnnotation}
	unreadablePath = []string{"metadata", "annotations", UnreadableAnnotation}
)

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
	// SetAside says, for people, what a hold did with an unreadable
	// RecordAnnotation: moved it to UnreadableAnnotation, or dropped it
	// where UnreadableAnnotation already keeps an earlier one. "" when
	// there was none.
	SetAside string
	// Refusal says, for people, why a release leaves fields held and what
	// to do: the object carries an unreadable record. "" when nothing is
	// refused.
	Refusal string
	// Refused names the recorded fields a release leaves held because the
	// unreadable record may claim them.
	Refused []string
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
//     prior value (removed when it was absent); the others are kept. The
//     parents holding made that are left empty go, and so does the record.
//
// Bad input holds, it never unholds. A RecordAnnotation that is not a
// record fencegate wrote does not stop a hold: the hold moves it to
// UnreadableAnnotation (or drops it when that annotation keeps an earlier
// one) and holds the fields as on an object without a record. While the
// object carries an unreadable record (in either annotation), a release
// leaves held, and recorded, every field that record names, or every
// recorded field when its names cannot be read, and says so in
// Step.Refusal: the record cannot be trusted to say what is whose.
func Plan(obj map[string]any, d engine.HoldDecision) (Step, error) {
	rec, bad, hasBad := recordOf(obj)
	aside, hasAside := annotation(obj, UnreadableAnnotation)
	p := newPatcher(obj)
	if d.Hold {
		var step Step
		if hasBad {
			p.remove(recordPath)
			if hasAside {
				step.SetAside = fmt.Sprintf("annotation %s was not a record fencegate wrote (%.80q): dropped, as %s keeps an earlier one", RecordAnnotation, bad, UnreadableAnnotation)
			} else {
				text, err := json.Marshal(bad)
				if err != nil {
					return Step{}, err
				}
				p.set(unreadablePath, text)
				step.SetAside = fmt.Sprintf("annotation %s was not a record fencegate wrote (%.80q): moved to %s", RecordAnnotation, bad, UnreadableAnnotation)
			}
		}
		return p.hold(rec, d.Fields, step)
	}
	if !hasBad && !hasAside {
		if rec == nil {
			return Step{}, nil
		}
		return p.release(rec, nil)
	}
	where, text := UnreadableAnnotation, aside
	if hasBad {
		where, text = RecordAnnotation, bad
	}
	claims, known := claimsOf(text)
	refuse := func(path []string) bool {
		return !known || slices.ContainsFunc(claims, func(c []string) bool { return overlap(c, path) })
	}
	step := Step{}
	if rec != nil {
		var err error
		if step, err = p.release(rec, refuse); err != nil {
			return Step{}, err
		}
	}
	names := "every field fencegate recorded, as the fields it names cannot be read"
	if known {
		texts := make([]string, 0, len(claims))
		for _, c := range claims {
			texts = append(texts, pathText(c))
		}
		names = "the fields it names: " + cmp.Or(strings.Join(texts, ", "), "none")
	}
	step.Refusal = fmt.Sprintf("annotation %s holds a record fencegate did not write (%.80q), so the release leaves held %s; "+
		"set those fields as they should be, then remove the annotation: fencegate then releases what it recorded", where, text, names)
	return step, nil
}

// recordOf reads the object's record: nil when it has none or it is not
// a record fencegate wrote, and then (bad, true) is the annotation's text.
func recordOf(obj map[string]any) (rec *Record, bad string, hasBad bool) {
	text, ok := annotation(obj, RecordAnnotation)
	if !ok {
		return nil, "", false
	}
	rec = &Record{}
	if err := json.Unmarshal([]byte(text), rec); err != nil || !rec.valid() {
		return nil, text, true
	}
	return rec, "", false
}

// annotation returns the object's annotation key, and whether it has one;
// a value that is not a string (never so from the API server) is taken as
// its JSON text.
func annotation(obj map[string]any, key string) (string, bool) {
	raw, ok := lookup(obj, []string{"metadata", "annotations", key})
	if !ok {
		return "", false
	}
	if text, ok := raw.(string); ok {
		return text, true
	}
	text, _ := json.Marshal(raw)
	return string(text), true
}

// claimsOf reads the paths an unreadable record names, as far as it can
// be read: known is false when it is not a JSON object whose fields each
// name a path of keys, so that what it claims is not known.
func claimsOf(text string) (paths [][]string, known bool) {
	var r struct {
		Fields []struct {
			Path []string `json:"path"`
		} `json:"fields"`
	}
	if err := json.Unmarshal([]byte(text), &r); err != nil {
		return nil, false
	}
	for _, f := range r.Fields {
		if len(f.Path) == 0 {
			return nil, false
		}
		paths = append(paths, f.Path)
	}
	return paths, true
}

// overlap reports whether one of the paths is the other or below it.
func overlap(a, b []string) bool {
	n := min(len(a), len(b))
	return slices.Equal(a[:n], b[:n])
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

// hold sets the fields not at their held values; step carries what Plan
// already did (an unreadable record set aside).
func (p *patcher) hold(rec *Record, fields []engine.HoldField, step Step) (Step, error) {
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
	if changed {
		if err := p.setRecord(rec); err != nil {
			return Step{}, err
		}
	} else if step.SetAside == "" {
		return Step{}, nil
	}
	step.Action, step.Patch, step.Reverted = Holding, p.ops, reverted
	return step, nil
}

// release sets back the recorded fields but those refuse names (nil:
// none), which stay held and recorded; it removes the record when none is
// left, and then the parents holding made that are left empty.
func (p *patcher) release(rec *Record, refuse func(path []string) bool) (Step, error) {
	var step Step
	var left Record
	var made [][]string
	for _, f := range rec.Fields {
		if refuse != nil && refuse(f.Path) {
			step.Refused = append(step.Refused, pathText(f.Path))
			left.Fields = append(left.Fields, f)
			continue
		}
		for n := 1; n <= f.Created; n++ {
			made = append(made, f.Path[:len(f.Path)-n])
		}
		current, present := lookup(p.obj, f.Path)
		if !present || !sameJSON(current, f.Value) || !soleOwner(p.obj, f.Path, FieldManager) {
			step.Kept = append(step.Kept, pathText(f.Path))
			continue
		}
		if f.Prior != nil {
			p.set(f.Path, f.Prior)
			continue
		}
		p.remove(f.Path)
	}
	switch {
	case len(left.Fields) == len(rec.Fields):
		// Every field stays held: the record stays as it is.
		return step, nil
	case len(left.Fields) > 0:
		if err := p.setRecord(&left); err != nil {
			return Step{}, err
		}
	default:
		p.remove(recordPath)
	}
	// A parent is emptied only once every field under it is gone, whichever
	// field's hold made it: the deepest go first, so that their own
	// parents are seen empty too.
	slices.SortStableFunc(made, func(a, b []string) int { return cmp.Compare(len(b), len(a)) })
	for _, parent := range made {
		if m, ok := lookupObject(p.obj, parent); ok && len(m) == 0 {
			p.remove(parent)
		}
	}
	step.Action, step.Patch = Releasing, p.ops
	return step, nil
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

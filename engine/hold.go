package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
)

// holdEntryPoint decides whether an actuator's object is held on this
// cluster (docs/design.md, "Holding actuators"). It is the one entry point
// a policy set may leave out, when no kinds are held (Options.HoldKinds):
// without it nothing can be held, so with held kinds a revision without it
// is refused.
var holdEntryPoint = ast.MustParseRef("data.fencegate.hold.decision")

// ErrNoHoldPolicy is returned by Hold when the policies in force do not
// define data.fencegate.hold.decision.
var ErrNoHoldPolicy = errors.New("the policies define no data.fencegate.hold.decision: nothing can be held")

// HoldDecision is the result of data.fencegate.hold.decision for one
// object.
type HoldDecision struct {
	// Kind names the rule (or rules, joined by ",") the object falls
	// under; "" for an object of no held kind.
	Kind string `json:"kind"`
	// Hold is true while the object's actuator must not act here.
	Hold bool `json:"hold"`
	// Fields are what holding sets, and so what releasing undoes.
	Fields []HoldField `json:"fields"`
	// Quiet is true when every field is at its held value and the
	// actuator reports nothing still running.
	Quiet bool `json:"quiet"`
	// Activity says what still runs, for a person; "" when quiet.
	Activity string `json:"activity"`
	// Parents are the objects that could revert a hold of this one.
	Parents []ObjectRef `json:"parents"`
}

// HoldField is one field a hold sets.
type HoldField struct {
	// Path is the field's path from the object's root, one key per
	// element: ["spec", "suspend"].
	Path []string `json:"path"`
	// Value is what holding sets the field to.
	Value any `json:"value"`
}

// ObjectRef names an object by group, kind, namespace and name; a part
// the object naming it does not know is "".
type ObjectRef struct {
	Group     string `json:"group"`
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// Hold evaluates data.fencegate.hold.decision for an object of domain
// (input {"object": obj, "domain": domain}), with that domain's data.fence.
func (e *Engine) Hold(ctx context.Context, domain string, obj map[string]any) (HoldDecision, error) {
	now := e.clock.Now()
	snap, err := e.current.Load().snapshot(domain).at(ctx, now)
	if err != nil {
		return HoldDecision{}, err
	}
	if !snap.hasFence {
		return HoldDecision{}, ErrNotReady
	}
	d, err := snap.hold(ctx, domain, obj, now)
	if err == nil {
		e.recentHolds.record(domain, obj, now)
	}
	return d, err
}

// hold evaluates the hold decision with the snapshot's data.
func (s *snapshot) hold(ctx context.Context, domain string, obj map[string]any, now time.Time) (HoldDecision, error) {
	if s.policy.hold == nil {
		return HoldDecision{}, ErrNoHoldPolicy
	}
	input, err := ast.InterfaceToValue(map[string]any{"object": obj, "domain": domain})
	if err != nil {
		return HoldDecision{}, fmt.Errorf("hold input: %w", err)
	}
	rs, err := s.policy.hold.Eval(ctx, rego.EvalParsedInput(input), rego.EvalTransaction(s.txn), rego.EvalTime(now))
	if err != nil {
		return HoldDecision{}, fmt.Errorf("evaluate %v: %w", holdEntryPoint, err)
	}
	return holdDecision(rs)
}

// holdDecision reads the decision object of a result set; a decision not
// of the shape the hold controller applies (a field outside spec and
// metadata, say) is an error, not a silent no-op.
func holdDecision(rs rego.ResultSet) (HoldDecision, error) {
	value, err := decisionValue(rs, holdEntryPoint.String())
	if err != nil {
		return HoldDecision{}, err
	}
	bad := func(field, want string) error {
		return fmt.Errorf("%v: %s is %s: want %s", holdEntryPoint, field, describe(value[field]), want)
	}
	var d HoldDecision
	var ok bool
	if d.Kind, ok = value["kind"].(string); !ok {
		return d, bad("kind", "a string")
	}
	if d.Hold, ok = value["hold"].(bool); !ok {
		return d, bad("hold", "a boolean")
	}
	if d.Quiet, ok = value["quiet"].(bool); !ok {
		return d, bad("quiet", "a boolean")
	}
	if d.Activity, ok = value["activity"].(string); !ok {
		return d, bad("activity", "a string")
	}
	fields, ok := value["fields"].([]any)
	if !ok {
		return d, bad("fields", "an array")
	}
	for i, raw := range fields {
		f, err := holdField(raw)
		if err != nil {
			return d, fmt.Errorf("%v: fields[%d]: %w", holdEntryPoint, i, err)
		}
		d.Fields = append(d.Fields, f)
	}
	parents, ok := value["parents"].([]any)
	if !ok {
		return d, bad("parents", "an array")
	}
	for i, raw := range parents {
		p, ok := raw.(map[string]any)
		if !ok {
			return d, fmt.Errorf("%v: parents[%d] is %s: want an object", holdEntryPoint, i, describe(raw))
		}
		text := func(k string) string { s, _ := p[k].(string); return s }
		d.Parents = append(d.Parents, ObjectRef{Group: text("group"), Kind: text("kind"), Namespace: text("namespace"), Name: text("name")})
	}
	return d, nil
}

// holdField reads one {"path": [...], "value": ...} entry.
func holdField(raw any) (HoldField, error) {
	entry, ok := raw.(map[string]any)
	if !ok {
		return HoldField{}, fmt.Errorf("is %s: want an object with path and value", describe(raw))
	}
	segments, ok := entry["path"].([]any)
	if !ok || len(segments) == 0 {
		return HoldField{}, fmt.Errorf("path is %s: want a non-empty array of keys", describe(entry["path"]))
	}
	if segments[0] != "spec" && segments[0] != "metadata" {
		return HoldField{}, fmt.Errorf("path %s starts outside spec and metadata: a hold sets what the object's owner declares", describe(entry["path"]))
	}
	f := HoldField{Path: make([]string, len(segments))}
	for i, s := range segments {
		if f.Path[i], ok = s.(string); !ok || f.Path[i] == "" {
			return HoldField{}, fmt.Errorf("path %s: element %d is %s: want an object key", describe(entry["path"]), i, describe(s))
		}
	}
	if f.Value, ok = entry["value"]; !ok {
		return HoldField{}, errors.New("has no value")
	}
	return f, nil
}

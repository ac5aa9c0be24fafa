package enginetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"

	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/fencestate"
)

// Reference evaluates the policies the way OPA's own server does, with none
// of the engine's machinery: the modules compiled as they are, the data in
// OPA's in-memory store (data.fence written in a write transaction), and
// each AdmissionReview decoded with encoding/json (numbers kept exact, as
// OPA's server decodes them) and given whole as input to the whole policy.
// It is the oracle the engine's fast path is tested and benchmarked
// against.
type Reference struct {
	store                storage.Store
	modules              map[string][]byte
	admission, reconcile rego.PreparedEvalQuery
}

// NewReference compiles modules (file name → Rego) with config as
// data.fencegate.config. It has no fence state until WriteFence.
func NewReference(ctx context.Context, modules map[string][]byte, config map[string]any) (*Reference, error) {
	if config == nil {
		config = map[string]any{}
	}
	r := &Reference{
		store:   inmem.NewFromObject(map[string]any{"fencegate": map[string]any{"config": config}}),
		modules: modules,
	}
	var err error
	if r.admission, err = r.prepare(ctx, "data.fencegate.admission.decision"); err != nil {
		return nil, err
	}
	if r.reconcile, err = r.prepare(ctx, "data.fencegate.reconcile.decision"); err != nil {
		return nil, err
	}
	return r, nil
}

// Prepare compiles query (a document of the modules: data.system.main,
// say) and returns what evaluates it with one AdmissionReview body as
// input, as OPA's server answers a POST of the body to the document.
func (r *Reference) Prepare(ctx context.Context, query string) (func(ctx context.Context, body []byte) (any, error), error) {
	q, err := r.prepare(ctx, query)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, body []byte) (any, error) {
		input, err := decodeJSON(body)
		if err != nil {
			return nil, fmt.Errorf("decode the AdmissionReview: %w", err)
		}
		var out any
		err = r.eval(ctx, q, input, &out)
		return out, err
	}, nil
}

func (r *Reference) prepare(ctx context.Context, query string) (rego.PreparedEvalQuery, error) {
	opts := []func(*rego.Rego){rego.Query(query), rego.Store(r.store)}
	for _, name := range slices.Sorted(maps.Keys(r.modules)) {
		opts = append(opts, rego.Module(name, string(r.modules[name])))
	}
	q, err := rego.New(opts...).PrepareForEval(ctx)
	if err != nil {
		return rego.PreparedEvalQuery{}, fmt.Errorf("compile %s: %w", query, err)
	}
	return q, nil
}

// WriteFence stores state as data.fence, as the fence agent would through
// OPA's data API.
func (r *Reference) WriteFence(ctx context.Context, state fencestate.State) error {
	doc, err := decodeJSON(mustJSON(state))
	if err != nil {
		return fmt.Errorf("encode data.fence: %w", err)
	}
	if err := storage.WriteOne(ctx, r.store, storage.AddOp, storage.MustParsePath("/fence"), doc); err != nil {
		return fmt.Errorf("write data.fence: %w", err)
	}
	return nil
}

// Admit decides one AdmissionReview body.
func (r *Reference) Admit(ctx context.Context, body []byte) (engine.AdmissionDecision, error) {
	input, err := decodeJSON(body)
	if err != nil {
		return engine.AdmissionDecision{}, fmt.Errorf("decode the AdmissionReview: %w", err)
	}
	var d struct {
		engine.AdmissionDecision
		Allowed *bool `json:"allowed"`
	}
	if err := r.eval(ctx, r.admission, input, &d); err != nil {
		return engine.AdmissionDecision{}, err
	}
	if d.Allowed == nil {
		return engine.AdmissionDecision{}, errors.New("data.fencegate.admission.decision has no allowed")
	}
	out := d.AdmissionDecision
	out.Allowed = *d.Allowed
	// The engine leaves empty lists out.
	out.Reasons, out.Warnings, out.Violations = nilIfEmpty(out.Reasons), nilIfEmpty(out.Warnings), nilIfEmpty(out.Violations)
	if len(out.Patch) == 0 {
		out.Patch = nil
	}
	return out, nil
}

// Reconcile decides for one Component.
func (r *Reference) Reconcile(ctx context.Context, component map[string]any) (engine.ReconcileDecision, error) {
	input, err := decodeJSON(mustJSON(map[string]any{"component": component}))
	if err != nil {
		return engine.ReconcileDecision{}, fmt.Errorf("encode the input: %w", err)
	}
	var d engine.ReconcileDecision
	err = r.eval(ctx, r.reconcile, input, &d)
	return d, err
}

// eval evaluates q with input and decodes its one result into out.
func (r *Reference) eval(ctx context.Context, q rego.PreparedEvalQuery, input any, out any) error {
	rs, err := q.Eval(ctx, rego.EvalInput(input))
	if err != nil {
		return err
	}
	if len(rs) != 1 || len(rs[0].Expressions) != 1 {
		return fmt.Errorf("the decision has %d results: want one", len(rs))
	}
	raw, err := json.Marshal(rs[0].Expressions[0].Value)
	if err != nil {
		return fmt.Errorf("encode the decision: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(out); err != nil {
		return fmt.Errorf("read the decision %s: %w", raw, err)
	}
	return nil
}

// decodeJSON decodes one JSON value, numbers as json.Number.
func decodeJSON(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("data after the JSON value")
	}
	return v, nil
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"

	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/policies"
)

// envelope is the `package system` module that makes OPA's server answer
// AdmissionReviews, as in OPA's Kubernetes admission-control tutorial,
// around fencegate's shipped admission decision.
//
//go:embed system.rego
var envelope string

// envelopeFile is the name the envelope is loaded under.
const envelopeFile = "system.rego"

// opaModules are the modules OPA's server is given: the shipped policies and
// the envelope.
func opaModules() (map[string][]byte, error) {
	modules, err := policies.Shipped()
	if err != nil {
		return nil, err
	}
	modules[envelopeFile] = []byte(envelope)
	return modules, nil
}

// decision is data.fencegate.admission.decision as a plain evaluation of the
// shipped policies gives it.
type decision struct {
	Allowed  bool     `json:"allowed"`
	Reasons  []string `json:"reasons"`
	Warnings []string `json:"warnings"`
	Patch    []any    `json:"patch"`
}

// oracle evaluates the shipped policies the plain way: the whole
// AdmissionReview as input to the whole policy, in this process. It is what
// both servers' answers are checked against.
type oracle struct {
	query rego.PreparedEvalQuery
}

// newOracle prepares the admission decision over fence and config
// (data.fencegate.config).
func newOracle(ctx context.Context, fence fencestate.State, config map[string]any) (*oracle, error) {
	modules, err := policies.Shipped()
	if err != nil {
		return nil, err
	}
	q, err := prepare(ctx, "data.fencegate.admission.decision", modules, fence, config)
	if err != nil {
		return nil, err
	}
	return &oracle{query: q}, nil
}

// prepare compiles query over modules, with fence as data.fence and config
// as data.fencegate.config.
func prepare(ctx context.Context, query string, modules map[string][]byte, fence fencestate.State, config map[string]any) (rego.PreparedEvalQuery, error) {
	fenceDoc, err := toDocument(fence)
	if err != nil {
		return rego.PreparedEvalQuery{}, err
	}
	store := inmem.NewFromObject(map[string]any{
		"fence":     fenceDoc,
		"fencegate": map[string]any{"config": config},
	})
	opts := []func(*rego.Rego){rego.Query(query), rego.Store(store)}
	for _, name := range slices.Sorted(maps.Keys(modules)) {
		opts = append(opts, rego.Module(name, string(modules[name])))
	}
	q, err := rego.New(opts...).PrepareForEval(ctx)
	if err != nil {
		return rego.PreparedEvalQuery{}, fmt.Errorf("compile %s: %w", query, err)
	}
	return q, nil
}

// decide evaluates the decision for one AdmissionReview body.
func (o *oracle) decide(ctx context.Context, body []byte) (decision, error) {
	var input any
	if err := json.Unmarshal(body, &input); err != nil {
		return decision{}, fmt.Errorf("decode the AdmissionReview: %w", err)
	}
	rs, err := o.query.Eval(ctx, rego.EvalInput(input))
	if err != nil {
		return decision{}, fmt.Errorf("evaluate data.fencegate.admission.decision: %w", err)
	}
	if len(rs) != 1 || len(rs[0].Expressions) != 1 {
		return decision{}, fmt.Errorf("data.fencegate.admission.decision gave %d results: want one", len(rs))
	}
	raw, err := json.Marshal(rs[0].Expressions[0].Value)
	if err != nil {
		return decision{}, fmt.Errorf("encode the decision: %w", err)
	}
	var d decision
	if err := json.Unmarshal(raw, &d); err != nil {
		return decision{}, fmt.Errorf("read the decision %s: %w", raw, err)
	}
	return d, nil
}

// toDocument turns a value into the JSON document OPA stores for it.
func toDocument(v any) (map[string]any, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode %T: %w", v, err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("decode %T: %w", v, err)
	}
	return doc, nil
}

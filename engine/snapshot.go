package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"

	"github.com/fencegate/fencegate/fencestate"
)

// residualNamespace is the package that partial evaluation writes the
// residual admission policy into.
const residualNamespace = "fencegate_residual"

var shallow = false

var (
	residualDecision = ast.MustParseRef("data." + residualNamespace + ".decision")
	residualResult   = ast.Var("__fencegate_result__")
)

// snapshot is everything one decision needs: a policy revision, the fence
// state, the data store holding both, and the queries prepared against them.
// It is immutable; a fence write or a reload builds a new one and swaps it in
// whole, so an evaluation never sees half of a change and never waits for
// one.
type snapshot struct {
	policy *policy
	// fence is the state as written; hasFence is false until one was.
	fence    fencestate.State
	hasFence bool
	// store holds data.fence and data.fencegate.config. Nothing writes to
	// it after it is built, so its read transactions never wait.
	store storage.Store
	// admission is the query requests are evaluated with: the residual of
	// partially evaluating the admission policy against this snapshot's
	// data, or the full query when partial evaluation did not give one
	// (residualErr says why).
	admission   rego.PreparedEvalQuery
	residualErr error
	// inputPaths are the parts of an AdmissionReview that admission reads.
	inputPaths *pathTree
	// cache remembers admission decisions by input; nil when the admission
	// query is not deterministic or plain evaluation was asked for.
	cache *decisionCache
	// fullAdmission evaluates the admission entry point itself.
	fullAdmission rego.PreparedEvalQuery
	reconcile     rego.PreparedEvalQuery
	// plain: admission requests are evaluated with the full query.
	plain bool
	// expiresAt is when an active state's validity ends (valid_until_ns);
	// zero when the state has no bound.
	expiresAt time.Time
	// expired is this snapshot with the lease expired, built when first
	// needed.
	expired struct {
		once sync.Once
		snap *snapshot
		err  error
	}
}

// newSnapshot builds the snapshot of a policy revision and a fence state
// (nil before the agent wrote one). With plain set, admission requests are
// evaluated with the full query.
func newSnapshot(ctx context.Context, p *policy, fence *fencestate.State, plain bool) (*snapshot, error) {
	s := &snapshot{policy: p}
	data := map[string]any{"fencegate": map[string]any{"config": p.config}}
	if fence != nil {
		s.fence, s.hasFence = *fence, true
		value, err := jsonValue(fence)
		if err != nil {
			return nil, fmt.Errorf("encode fence state: %w", err)
		}
		data["fence"] = value
		if fence.Status == fencestate.Active && fence.ValidUntilNS > 0 {
			s.expiresAt = time.Unix(0, fence.ValidUntilNS)
		}
	}
	value, err := ast.InterfaceToValue(data)
	if err != nil {
		return nil, fmt.Errorf("encode policy data: %w", err)
	}
	s.store = inmem.NewFromASTObject(value.(ast.Object))

	if s.fullAdmission, err = s.prepare(ctx, p.compiler, admissionEntryPoint); err != nil {
		return nil, err
	}
	if s.reconcile, err = s.prepare(ctx, p.compiler, reconcileEntryPoint); err != nil {
		return nil, err
	}
	s.plain = plain
	s.admission, s.inputPaths = s.fullAdmission, p.inputPaths
	if plain {
		s.residualErr = errors.New("plain evaluation was asked for")
		return s, nil
	}
	if residual, paths, err := s.prepareResidual(ctx); err != nil {
		s.residualErr = err
	} else {
		s.admission, s.inputPaths = residual, paths
	}
	return s, nil
}

func (s *snapshot) prepare(ctx context.Context, compiler *ast.Compiler, entry ast.Ref) (rego.PreparedEvalQuery, error) {
	pq, err := rego.New(
		rego.ParsedQuery(ast.NewBody(ast.NewExpr(ast.NewTerm(entry)))),
		rego.Compiler(compiler),
		rego.Store(s.store),
	).PrepareForEval(ctx)
	if err != nil {
		return rego.PreparedEvalQuery{}, fmt.Errorf("prepare %v: %w", entry, err)
	}
	return pq, nil
}

// prepareResidual partially evaluates the admission entry point with the
// input unknown: everything that depends only on the fence state and the
// config (which branch applies, the messages and their sprintf calls, the
// annotations to stamp) is evaluated here, once per fence state, and each
// request evaluates what is left. It returns the residual query and the
// input paths the residual reads.
//
// Partial evaluation leaves some constructs (comprehensions, calls it does
// not inline) referring to the original rules; the residual is then compiled
// together with the original modules, so that it always makes exactly the
// decisions of the full query.
func (s *snapshot) prepareResidual(ctx context.Context) (rego.PreparedEvalQuery, *pathTree, error) {
	pqs, err := rego.New(
		rego.ParsedQuery(ast.NewBody(ast.Equality.Expr(ast.NewTerm(residualResult), ast.NewTerm(admissionEntryPoint)))),
		rego.Compiler(s.policy.compiler),
		rego.Store(s.store),
		rego.ParsedUnknowns([]*ast.Term{ast.NewTerm(ast.InputRootRef)}),
		rego.PartialNamespace(residualNamespace),
		rego.ShallowInlining(shallow),
	).Partial(ctx)
	if err != nil {
		return rego.PreparedEvalQuery{}, nil, fmt.Errorf("partial evaluation: %w", err)
	}
	residual := &ast.Module{Package: &ast.Package{Path: residualDecision[:2].Copy()}}
	for _, body := range pqs.Queries {
		if refersTo(body, residualDecision) {
			return rego.PreparedEvalQuery{}, nil, errors.New("partial evaluation: the residual refers to itself")
		}
		residual.Rules = append(residual.Rules, &ast.Rule{
			Head:   ast.NewHead(ast.Var(residualDecision[2].Value.(ast.String)), nil, ast.NewTerm(residualResult)),
			Body:   body,
			Module: residual,
		})
	}
	modules := map[string]*ast.Module{"fencegate:residual": residual}
	for i, m := range pqs.Support {
		modules[fmt.Sprintf("fencegate:residual-support-%d", i)] = m
	}
	// The input paths are read from the residual as partial evaluation wrote
	// it: compiling moves call arguments into local variables, which would
	// hide that is_object and object.get read only part of a value.
	var paths *pathTree
	if selfContained(modules) {
		paths = inputPathsOf(modules)
	} else {
		for name, m := range s.policy.modules {
			modules[name] = m
		}
	}
	compiler, err := compileModules(modules)
	if err != nil {
		return rego.PreparedEvalQuery{}, nil, fmt.Errorf("residual: %w", err)
	}
	if paths == nil {
		paths = inputPathsOf(compiler.Modules)
	}
	pq, err := s.prepare(ctx, compiler, residualDecision)
	if err != nil {
		return rego.PreparedEvalQuery{}, nil, err
	}
	if deterministic(compiler.Modules) {
		s.cache = newDecisionCache()
	}
	return pq, paths, nil
}

// Data the residual may refer to without the original modules: its own
// rules and the base documents in the store.
var residualOwnData = []ast.Ref{
	residualDecision[:2],
	ast.MustParseRef("data.fence"),
	ast.MustParseRef("data.fencegate.config"),
}

// selfContained reports whether the modules refer to no data but their own
// rules and the store's documents.
func selfContained(modules map[string]*ast.Module) bool {
	contained := true
	for _, m := range modules {
		ast.WalkRefs(m, func(r ast.Ref) bool {
			if !contained || !r[0].Equal(ast.DefaultRootDocument) {
				return !contained
			}
			contained = slices.ContainsFunc(residualOwnData, r.HasPrefix)
			return !contained
		})
	}
	return contained
}

// refersTo reports whether x holds a reference to ref or below it.
func refersTo(x any, ref ast.Ref) bool {
	found := false
	ast.WalkRefs(x, func(r ast.Ref) bool {
		found = found || r.HasPrefix(ref)
		return found
	})
	return found
}

// at returns the snapshot that applies at now: this one, or, once an active
// state's validity has passed, the same state with the status unknown. The
// agent moves the status to unknown itself when its lease runs out; this is
// the engine's own safety belt in case the agent could not.
func (s *snapshot) at(ctx context.Context, now time.Time) (*snapshot, error) {
	if s.expiresAt.IsZero() || now.Before(s.expiresAt) {
		return s, nil
	}
	s.expired.once.Do(func() {
		state := s.fence
		state.Status = fencestate.Unknown
		state.Reason = "LEASE_EXPIRED"
		state.Message = fmt.Sprintf("the active state was valid until %s and was not renewed",
			s.expiresAt.UTC().Format(time.RFC3339Nano))
		// Built from the same immutable inputs on any goroutine, so a
		// cancelled request must not spoil it for the others.
		s.expired.snap, s.expired.err = newSnapshot(context.WithoutCancel(ctx), s.policy, &state, s.plain)
	})
	return s.expired.snap, s.expired.err
}

// jsonValue converts v to the plain JSON values the store holds.
func jsonValue(v any) (any, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var out any
	err = dec.Decode(&out)
	return out, err
}

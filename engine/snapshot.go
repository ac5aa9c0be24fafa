package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"

	"github.com/fencegate/fencegate/fencestate"
)

// residualNamespace is the package that partial evaluation writes the
// residual admission policy into.
const residualNamespace = "fencegate_residual"

var (
	residualDecision = ast.MustParseRef("data." + residualNamespace + ".decision")
	residualResult   = ast.Var("__fencegate_result__")
)

// snapshot is everything one decision needs: a policy revision, the fence
// state, the data document holding both and the admission query to
// evaluate. It is immutable; a fence write or a reload builds a new one and
// swaps it in whole, so an evaluation never sees half of a change and never
// waits for one.
type snapshot struct {
	policy *policy
	// fence is the state as written; hasFence is false until one was.
	fence    fencestate.State
	hasFence bool
	// txn reads this snapshot's data.fence and data.fencegate.config from
	// dataStore; every evaluation of this snapshot is given it.
	txn *snapshotTxn
	// admission is the query requests are evaluated with, inputPaths the
	// parts of an AdmissionReview it reads and cache its remembered
	// decisions (nil when it is not deterministic). They come from the
	// residual when partial evaluation gave one, else from the policy's
	// full query (residualErr says why).
	admission   rego.PreparedEvalQuery
	inputPaths  *pathTree
	cache       *decisionCache
	residual    *residual
	residualErr error
	// expiresAt is when an active state's validity ends (valid_until_ns);
	// zero when the state has no bound.
	expiresAt time.Time
	// renewable is set once two states that differ only in a renewal's
	// fields (renewal) gave the same pure residual: the decisions do not
	// depend on those fields, so the next renewal reuses this snapshot's
	// residual and remembered decisions without partial evaluation.
	renewable bool
	// expired is this snapshot with the lease expired, built when first
	// needed.
	expired struct {
		once sync.Once
		snap *snapshot
		err  error
	}
}

// newSnapshot builds the snapshot of a policy revision and a fence state
// (nil before the agent wrote one). prev, if not nil, is the snapshot this
// one replaces: when the new data partially evaluate to the same residual (a
// heartbeat only moves valid_until_ns along), its residual and remembered
// decisions are kept, and nothing is compiled or prepared. Once that was
// seen (prev.renewable), a renewal does not even partially evaluate: it
// only takes the new data in (renewed).
func newSnapshot(ctx context.Context, p *policy, fence *fencestate.State, prev *snapshot) (*snapshot, error) {
	renews := prev != nil && prev.policy == p && prev.hasFence && fence != nil && renewal(prev.fence, *fence)
	if renews && prev.renewable {
		return prev.renewed(*fence), nil
	}
	s := &snapshot{policy: p}
	data := map[string]any{"fencegate": map[string]any{"config": p.config}}
	if fence != nil {
		s.fence, s.hasFence = *fence, true
		value, err := ast.InterfaceToValue(fence)
		if err != nil {
			return nil, fmt.Errorf("encode fence state: %w", err)
		}
		data["fence"] = value
		s.expiresAt = validityEnd(*fence)
	}
	value, err := ast.InterfaceToValue(data)
	if err != nil {
		return nil, fmt.Errorf("encode policy data: %w", err)
	}
	s.txn = newSnapshotTxn(value.(ast.Object))

	s.admission, s.inputPaths = p.admission, p.inputPaths
	var reuse *residual
	if prev != nil && prev.policy == p {
		reuse = prev.residual
	}
	if s.residual, s.residualErr = s.prepareResidual(ctx, reuse); s.residualErr == nil {
		s.admission, s.inputPaths, s.cache = s.residual.query, s.residual.paths, s.residual.cache
	}
	s.renewable = renews && reuse != nil && s.residual == reuse
	return s, nil
}

// renewal reports whether next differs from cur at most in what a renewal
// of the same answer moves: the lease's end and the last answer's time.
func renewal(cur, next fencestate.State) bool {
	cur.ValidUntilNS, cur.LastSuccessNS = next.ValidUntilNS, next.LastSuccessNS
	return cur == next
}

// validityEnd is when fence stops being valid: an active state's
// valid_until_ns; zero (no bound) for any other.
func validityEnd(fence fencestate.State) time.Time {
	if fence.Status == fencestate.Active && fence.ValidUntilNS > 0 {
		return time.Unix(0, fence.ValidUntilNS)
	}
	return time.Time{}
}

// Keys of data.fence that a renewal moves.
var (
	fenceDocument  = ast.StringTerm("fence")
	validUntilKey  = ast.StringTerm("valid_until_ns")
	lastSuccessKey = ast.StringTerm("last_success_ns")
)

// renewed is s with fence, a renewal of s's state (renewable): the same
// residual, remembered decisions and prepared queries, and data in which
// data.fence has fence's lease end and last answer's time. The queries
// that read the data at evaluation time (the controller's, the holds')
// read the new values, and the validity check the new end.
func (s *snapshot) renewed(fence fencestate.State) *snapshot {
	n := &snapshot{
		policy: s.policy, fence: fence, hasFence: true,
		admission: s.admission, inputPaths: s.inputPaths, cache: s.cache, residual: s.residual, residualErr: s.residualErr,
		expiresAt: validityEnd(fence), renewable: true,
	}
	// The maps only replace terms: both documents are immutable, so the
	// new one shares every term the renewal does not move.
	data, _ := s.txn.data.Map(func(k, v *ast.Term) (*ast.Term, *ast.Term, error) {
		if !k.Equal(fenceDocument) {
			return k, v, nil
		}
		doc, _ := v.Value.(ast.Object).Map(func(k, v *ast.Term) (*ast.Term, *ast.Term, error) {
			switch {
			case k.Equal(validUntilKey):
				v = ast.IntNumberTerm(int(fence.ValidUntilNS))
			case k.Equal(lastSuccessKey):
				v = ast.IntNumberTerm(int(fence.LastSuccessNS))
			}
			return k, v, nil
		})
		return k, ast.NewTerm(doc), nil
	})
	n.txn = newSnapshotTxn(data)
	return n
}

// prepare prepares the query of an entry point against the compiler. The
// data come with each evaluation (EvalTransaction), so the prepared query
// serves every snapshot.
func prepare(ctx context.Context, compiler *ast.Compiler, entry ast.Ref) (rego.PreparedEvalQuery, error) {
	pq, err := rego.New(
		rego.ParsedQuery(ast.NewBody(ast.NewExpr(ast.NewTerm(entry)))),
		rego.Compiler(compiler),
		rego.Store(dataStore),
	).PrepareForEval(ctx)
	if err != nil {
		return rego.PreparedEvalQuery{}, fmt.Errorf("prepare %v: %w", entry, err)
	}
	return pq, nil
}

// residual is the admission policy partially evaluated against one
// snapshot's data, prepared for evaluation.
type residual struct {
	// source is the residual's Rego, to recognise an identical one.
	source string
	// pure: the residual refers to no base document of the store, so its
	// decisions depend on the input alone and it can serve any snapshot
	// whose data give the same source.
	pure  bool
	query rego.PreparedEvalQuery
	// paths are the parts of an AdmissionReview it reads.
	paths *pathTree
	// cache remembers its decisions; nil when it is not deterministic.
	cache *decisionCache
}

// prepareResidual partially evaluates the admission entry point with the
// input unknown: everything that depends only on the fence state and the
// config (which branch applies, the messages and their sprintf calls, the
// annotations to stamp) is evaluated here, once per fence state, and each
// request evaluates what is left. When the result is the same pure residual
// as reuse's, reuse is returned, remembered decisions and all.
//
// Partial evaluation leaves some constructs (comprehensions, calls it does
// not inline) referring to the original rules; the residual is then compiled
// together with the original modules, so that it always makes exactly the
// decisions of the full query.
func (s *snapshot) prepareResidual(ctx context.Context, reuse *residual) (*residual, error) {
	pqs, err := rego.New(
		rego.ParsedQuery(ast.NewBody(ast.Equality.Expr(ast.NewTerm(residualResult), ast.NewTerm(admissionEntryPoint)))),
		rego.Compiler(s.policy.compiler),
		rego.Store(dataStore),
		rego.Transaction(s.txn),
		rego.ParsedUnknowns([]*ast.Term{ast.NewTerm(ast.InputRootRef)}),
		rego.PartialNamespace(residualNamespace),
		rego.DisableInlining(s.policy.keepRules),
		// Rules that depend on the request stay rules of the residual
		// (support rules), each written once. Inlined, a negation of a
		// rule with several conditions becomes the cross product of its
		// negated conditions, and every rule that uses it is copied once
		// per term: with the chart's config (a controller user), the
		// shipped policies' residual grew to 150 KB of Rego, 2.5 MiB
		// compiled per snapshot, and each undecided request took 4 to 6
		// times as long.
		rego.ShallowInlining(true),
	).Partial(ctx)
	if err != nil {
		return nil, fmt.Errorf("partial evaluation: %w", err)
	}
	module := &ast.Module{Package: &ast.Package{Path: residualDecision[:2].Copy()}}
	for _, body := range pqs.Queries {
		if refersTo(body, residualDecision) {
			return nil, errors.New("partial evaluation: the residual refers to itself")
		}
		module.Rules = append(module.Rules, &ast.Rule{
			Head:   ast.NewHead(ast.Var(residualDecision[2].Value.(ast.String)), nil, ast.NewTerm(residualResult)),
			Body:   body,
			Module: module,
		})
	}
	modules := map[string]*ast.Module{"fencegate:residual": module}
	// Partial evaluation returns the support modules in no fixed order.
	sources := []string{module.String()}
	for i, m := range pqs.Support {
		modules[fmt.Sprintf("fencegate:residual-support-%d", i)] = m
		sources = append(sources, m.String())
	}
	slices.Sort(sources[1:])
	source := strings.Join(sources, "\n")
	contained, pure := dataRefs(modules)
	if reuse != nil && pure && reuse.pure && reuse.source == source {
		return reuse, nil
	}
	r := &residual{source: source, pure: pure}
	// The input paths are read from the residual as partial evaluation wrote
	// it: compiling moves call arguments into local variables, which would
	// hide that is_object and object.get read only part of a value.
	if contained {
		r.paths = inputPathsOf(modules)
	} else {
		for name, m := range s.policy.modules {
			modules[name] = m
		}
	}
	compiler, err := compileModules(modules)
	if err != nil {
		return nil, fmt.Errorf("residual: %w", err)
	}
	if r.paths == nil {
		r.paths = inputPathsOf(compiler.Modules)
	}
	r.paths.seal()
	if r.query, err = prepare(ctx, compiler, residualDecision); err != nil {
		return nil, err
	}
	if deterministic(compiler.Modules) {
		r.cache = newDecisionCache()
	}
	return r, nil
}

// Base documents of the store that a residual may refer to.
var storeDocuments = []ast.Ref{
	ast.MustParseRef("data.fence"),
	ast.MustParseRef("data.fencegate.config"),
}

// dataRefs reports whether the modules refer to no data but their own rules
// and the store's documents (contained), and to no store document either
// (pure).
func dataRefs(modules map[string]*ast.Module) (contained, pure bool) {
	contained, pure = true, true
	for _, m := range modules {
		ast.WalkRefs(m, func(r ast.Ref) bool {
			if !r[0].Equal(ast.DefaultRootDocument) || r.HasPrefix(residualDecision[:2]) {
				return false
			}
			if slices.ContainsFunc(storeDocuments, r.HasPrefix) {
				pure = false
			} else {
				contained = false
			}
			return !contained
		})
	}
	return contained, pure && contained
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
		s.expired.snap, s.expired.err = newSnapshot(context.WithoutCancel(ctx), s.policy, &state, s)
	})
	return s.expired.snap, s.expired.err
}

package engine

import (
	"slices"

	"github.com/open-policy-agent/opa/v1/ast"
)

// conflictingRules returns the rules partial evaluation must not inline:
// rules and functions of one value that may give a request two values, and
// whose value depends on the request. OPA reports such a conflict when it
// evaluates the rule. Inlined into the residual, each definition (or each
// solution of the body) becomes an alternative of its own, and a condition
// on the value keeps one of them: the conflict would go unseen and the
// residual would decide where the policy as written fails. Left as
// references, they are evaluated, and their conflicts reported, with each
// request.
func conflictingRules(compiler *ast.Compiler) []string {
	groups := map[string][]*ast.Rule{}
	for _, m := range compiler.Modules {
		for _, r := range m.Rules {
			if r.Default || r.Head.RuleKind() != ast.SingleValue {
				continue
			}
			path := r.Ref().GroundPrefix().String()
			groups[path] = append(groups[path], r)
		}
	}
	readsInput := inputDependence(compiler)
	var paths []string
	for path, rules := range groups {
		if mayConflict(rules) && slices.ContainsFunc(rules, readsInput) {
			paths = append(paths, path)
		}
	}
	slices.Sort(paths)
	return paths
}

// mayConflict reports whether the definitions of one rule can give two
// values: several definitions that are not all the same constant, or one
// whose value varies with the solutions of its body, or a rule that builds
// an object key by key.
func mayConflict(rules []*ast.Rule) bool {
	var values []*ast.Term
	iterates := false
	for _, r := range rules {
		for def := r; def != nil; def = def.Else {
			values = append(values, def.Head.Value)
			iterates = iterates || bodyIterates(def.Body)
		}
	}
	constant := true
	for _, v := range values {
		constant = constant && v != nil && ast.IsConstant(v.Value) && v.Equal(values[0])
	}
	switch {
	case constant:
		return false
	case len(rules) > 1, !rules[0].Ref().IsGround():
		return true
	default:
		return iterates
	}
}

// bodyIterates reports whether a body can have several solutions: it
// iterates over a collection (a reference with a variable key, or a
// membership test that binds a variable).
func bodyIterates(body ast.Body) bool {
	found := false
	ast.WalkRefs(body, func(r ast.Ref) bool {
		for _, t := range r[1:] {
			if _, ok := t.Value.(ast.Var); ok {
				found = true
			}
		}
		return found
	})
	ast.WalkExprs(body, func(e *ast.Expr) bool {
		if e.IsCall() {
			switch e.Operator().String() {
			case "internal.member_2", "internal.member_3":
				found = true
			}
		}
		return found
	})
	return found
}

// inputDependence returns a function reporting whether a rule reads the
// input, itself or through the rules it refers to. A function may be
// called with the input, so every function counts as reading it.
func inputDependence(compiler *ast.Compiler) func(*ast.Rule) bool {
	memo := map[*ast.Rule]bool{}
	var reads func(r *ast.Rule) bool
	reads = func(r *ast.Rule) bool {
		if v, ok := memo[r]; ok {
			return v
		}
		memo[r] = false // Rego has no recursion; this only ends a cycle.
		v := len(r.Head.Args) > 0 || refersTo(r, ast.InputRootRef)
		for dep := range compiler.Graph.Dependencies(r) {
			if v {
				break
			}
			if d, ok := dep.(*ast.Rule); ok {
				v = reads(d)
			}
		}
		memo[r] = v
		return v
	}
	return reads
}

package engine

import (
	"encoding/binary"
	"maps"
	"slices"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/valyala/fastjson"
)

// pathTree is the set of input paths the policies read. Only those parts of
// an AdmissionReview are turned into the policy's input: a 6 KB UPDATE with
// managedFields costs far more to convert than to evaluate, and the shipped
// policies read a handful of fields. A policy that reads a whole subtree
// (input.request.object, or input itself) gets the whole subtree.
//
// The projection of a value keeps its type: an object becomes an object with
// just the members named by children (none, if only its type is read); any
// other value is kept whole.
type pathTree struct {
	// all: the whole value at this path is read.
	all bool
	// children: the keys below this path that are read, when not all.
	children map[string]*pathTree
	// keys are the children's keys, sorted, and keyTerms their AST terms,
	// set by seal; shared (read-only) by every projection.
	keys     []string
	keyTerms []*ast.Term
}

// seal fixes the tree for use: projections and cache keys walk the
// children in a fixed order and reuse their key terms.
func (t *pathTree) seal() *pathTree {
	t.keys = slices.Sorted(maps.Keys(t.children))
	t.keyTerms = make([]*ast.Term, len(t.keys))
	for i, k := range t.keys {
		t.keyTerms[i] = ast.StringTerm(k)
		t.children[k].seal()
	}
	return t
}

// add records that the value at path is read whole.
func (t *pathTree) add(path []string) {
	if t = t.touch(path); t != nil {
		t.all, t.children = true, nil
	}
}

// touch records that the type of the value at path is read, and returns its
// node; nil when the path is already read whole.
func (t *pathTree) touch(path []string) *pathTree {
	for _, key := range path {
		if t.all {
			return nil
		}
		if t.children == nil {
			t.children = map[string]*pathTree{}
		}
		child, ok := t.children[key]
		if !ok {
			child = &pathTree{}
			t.children[key] = child
		}
		t = child
	}
	if t.all {
		return nil
	}
	return t
}

// inputPathsOf finds every reference to input in the modules. A reference
// counts up to its first part that is not a constant string:
// input.request.userInfo.groups[_] reads input.request.userInfo.groups; a bare
// input (passed to a function, compared, ...) reads everything.
//
// Two kinds of builtin calls read less than the whole value they are given,
// and partially evaluated policies are full of them: a type check such as
// is_object(input.x) reads only the type of input.x, and object.get(input.x,
// "k", d) reads only input.x's type and its member "k". A projection keeps
// every value's type (an object stays an object, with just the members
// asked for), so these calls see exactly what they would see in the whole
// input.
func inputPathsOf(modules map[string]*ast.Module) *pathTree {
	tree := &pathTree{}
	// A call replaced by a function of the author's (with is_object as f)
	// may read all of its argument: then no call reads less.
	narrowCalls := !replacesNarrowCalls(modules)
	var visitor *ast.GenericVisitor
	walkAll := func(terms []*ast.Term) {
		for _, t := range terms {
			visitor.Walk(t)
		}
	}
	// call handles a builtin call; it reports false for a call it does not
	// know, whose operands are then walked as any other terms.
	call := func(operator *ast.Term, operands []*ast.Term) bool {
		if !narrowCalls {
			return false
		}
		name := operator.String()
		switch {
		case typeChecks[name] && len(operands) >= 1:
			path, ok := inputRefPath(operands[0])
			if !ok {
				return false
			}
			tree.touch(path)
			walkAll(operands[1:])
			return true
		case name == "object.get" && len(operands) >= 3:
			path, ok := inputRefPath(operands[0])
			if !ok {
				return false
			}
			tree.touch(path)
			switch key := operands[1].Value.(type) {
			case ast.String:
				tree.add(append(path, string(key)))
			case *ast.Array:
				// A path of keys: the longest prefix of strings is read
				// whole. (A number in it would index an array, which a
				// projection keeps whole anyway.)
				full := append([]string(nil), path...)
				for i := range key.Len() {
					s, isString := key.Elem(i).Value.(ast.String)
					if !isString {
						break
					}
					full = append(full, string(s))
				}
				tree.add(full)
			default:
				if !ast.IsConstant(key) {
					tree.add(path)
				}
				// A constant key that is not a string is in no JSON
				// object: the call returns the default either way.
			}
			walkAll(operands[1:])
			return true
		}
		return false
	}
	visitor = ast.NewGenericVisitor(func(x any) bool {
		switch x := x.(type) {
		case *ast.Expr:
			if x.IsCall() && call(x.OperatorTerm(), x.Operands()) {
				for _, w := range x.With {
					visitor.Walk(w)
				}
				return true
			}
		case ast.Call:
			return call(x[0], x[1:])
		case ast.Ref:
			if !x[0].Equal(ast.InputRootDocument) {
				return false
			}
			path, _ := refPath(x)
			tree.add(path)
			// The rest of the reference may hold other references, as in
			// input.a[input.b]; the head is done.
			walkAll(x[1:])
			return true
		case ast.Var:
			if x.Equal(ast.InputRootDocument.Value) {
				tree.add(nil)
			}
		}
		return false
	})
	for _, m := range modules {
		if narrowCalls {
			m = withoutInputAliases(m)
		}
		visitor.Walk(m)
	}
	return tree
}

// replacesNarrowCalls reports whether an expression of the modules replaces
// a type check or object.get with a with modifier.
func replacesNarrowCalls(modules map[string]*ast.Module) bool {
	found := false
	for _, m := range modules {
		ast.WalkExprs(m, func(expr *ast.Expr) bool {
			for _, w := range expr.With {
				name := w.Target.String()
				found = found || typeChecks[name] || name == "object.get"
			}
			return found
		})
	}
	return found
}

// withoutInputAliases returns a copy of m in which each of the compiler's
// local variables that only names a part of input (__local1__ =
// input.request.object, which the compiler writes to take a call's
// argument out of the call) is replaced by that reference. The calls that
// read less than their argument then show as such: object.get(__local1__,
// ["metadata", "name"], null) reads input.request.object.metadata.name,
// not all of input.request.object.
//
// A local is replaced only where that is exactly the same: it is assigned
// by one such expression and occurs nowhere outside the body holding it
// (not in its rule's head, not in an enclosing body that binds it). Any
// other use of it in the body still reads the whole reference once
// replaced. The copy is only read for its paths: the assignment becomes a
// type check of the reference, which reads that the value is there.
func withoutInputAliases(m *ast.Module) *ast.Module {
	m = m.Copy()
	for _, rule := range m.Rules {
		withoutInputAliasesIn(rule)
	}
	return m
}

// withoutInputAliasesIn replaces the input aliases in rule's bodies (see
// withoutInputAliases). A rule is the scope of its variables.
func withoutInputAliasesIn(rule *ast.Rule) {
	inRule := varCounts(rule)
	ast.WalkBodies(rule, func(body ast.Body) bool {
		inBody := varCounts(body)
		// Each alias's one assignment, by its index in body; -1 for a
		// variable assigned more than once.
		assignment := map[ast.Var]int{}
		refs := map[ast.Var]ast.Ref{}
		for i, expr := range body {
			v, ref, ok := inputAlias(expr)
			if !ok {
				continue
			}
			if _, again := assignment[v]; again {
				assignment[v] = -1
				continue
			}
			assignment[v], refs[v] = i, ref
		}
		aliases := map[ast.Var]ast.Ref{}
		for v, i := range assignment {
			if i < 0 || inBody[v] != inRule[v] {
				continue
			}
			aliases[v] = refs[v]
			// The assignment needs the value to be there, as a type
			// check does.
			body[i] = ast.IsObject.Expr(ast.NewTerm(refs[v].Copy()))
		}
		if len(aliases) == 0 {
			return false
		}
		for i, expr := range body {
			x, _ := ast.TransformVars(expr, func(v ast.Var) (ast.Value, error) {
				if ref, ok := aliases[v]; ok {
					return ref.Copy(), nil
				}
				return v, nil
			})
			body[i] = x.(*ast.Expr)
		}
		return false
	})
}

// varCounts counts the occurrences of each variable in x.
func varCounts(x any) map[ast.Var]int {
	counts := map[ast.Var]int{}
	ast.WalkVars(x, func(v ast.Var) bool {
		counts[v]++
		return false
	})
	return counts
}

// inputAlias reports whether expr assigns a reference to input made of
// constant keys to one of the compiler's local variables (__localN__ =
// input.x.y), and which.
func inputAlias(expr *ast.Expr) (ast.Var, ast.Ref, bool) {
	if expr.Negated || len(expr.With) > 0 || !expr.IsEquality() {
		return "", nil, false
	}
	a, b := expr.Operand(0), expr.Operand(1)
	if _, ok := b.Value.(ast.Var); ok {
		a, b = b, a
	}
	v, isVar := a.Value.(ast.Var)
	if !isVar || !v.IsGenerated() {
		return "", nil, false
	}
	// Only a reference of constant keys: one with a variable in it
	// (input.x[k]) binds that variable, which the replacement would lose.
	if _, ok := inputRefPath(b); !ok {
		return "", nil, false
	}
	return v, b.Value.(ast.Ref), true
}

// typeChecks are the builtins that read only their argument's type.
var typeChecks = map[string]bool{
	"is_object": true, "is_array": true, "is_set": true, "is_string": true,
	"is_number": true, "is_boolean": true, "is_null": true,
}

// refPath returns the constant string keys of an input reference up to its
// first other part, and whether there was no other part.
func refPath(ref ast.Ref) ([]string, bool) {
	path := make([]string, 0, len(ref)-1)
	for _, term := range ref[1:] {
		s, ok := term.Value.(ast.String)
		if !ok {
			return path, false
		}
		path = append(path, string(s))
	}
	return path, true
}

// inputRefPath returns the path of a term that is an input reference made
// of constant strings only.
func inputRefPath(t *ast.Term) ([]string, bool) {
	ref, ok := t.Value.(ast.Ref)
	if !ok || !ref[0].Equal(ast.InputRootDocument) {
		return nil, false
	}
	return refPath(ref)
}

// project builds the policy input from a parsed JSON value: the parts of v
// that tree (sealed) names, converted to AST values.
func project(v *fastjson.Value, tree *pathTree) ast.Value {
	if tree.all || v.Type() != fastjson.TypeObject {
		return toAST(v)
	}
	obj := ast.NewObjectWithCapacity(len(tree.keys))
	o, _ := v.Object() // v is an object: checked above
	for i, key := range tree.keys {
		if cv := lastMember(o, key); cv != nil {
			obj.Insert(tree.keyTerms[i], ast.NewTerm(project(cv, tree.children[key])))
		}
	}
	return obj
}

// appendKey appends to dst a key that identifies the projection of v by
// tree (sealed) without building it: two values get the same key only if
// their projections are equal. It is the decision cache's key, computed
// without allocating. A value read whole, or one that is not an object, is
// keyed by its JSON text (as parsed, so equal values written differently
// get different keys: a missed cache entry, never a wrong one); an object
// read in part by a presence mark per child, in the tree's order. Lengths
// are written before texts, so no two sequences of parts run together.
func appendKey(dst []byte, v *fastjson.Value, tree *pathTree) []byte {
	if tree.all || v.Type() != fastjson.TypeObject {
		dst = append(dst, 'v', 0, 0, 0, 0)
		at := len(dst)
		dst = v.MarshalTo(dst)
		binary.BigEndian.PutUint32(dst[at-4:at], uint32(len(dst)-at))
		return dst
	}
	dst = append(dst, 'o')
	o, _ := v.Object()
	for _, key := range tree.keys {
		cv := lastMember(o, key)
		if cv == nil {
			dst = append(dst, '-')
			continue
		}
		dst = appendKey(append(dst, '+'), cv, tree.children[key])
	}
	return dst
}

// lastMember returns the value of key in o. When a key repeats, the last
// one wins, as with encoding/json and OPA's own JSON decoding.
func lastMember(o *fastjson.Object, key string) *fastjson.Value {
	var found *fastjson.Value
	o.Visit(func(k []byte, v *fastjson.Value) {
		if string(k) == key {
			found = v
		}
	})
	return found
}

// toAST converts a parsed JSON value to an AST value.
func toAST(v *fastjson.Value) ast.Value {
	switch v.Type() {
	case fastjson.TypeObject:
		o, _ := v.Object()
		obj := ast.NewObjectWithCapacity(o.Len())
		o.Visit(func(k []byte, cv *fastjson.Value) {
			obj.Insert(ast.StringTerm(string(k)), ast.NewTerm(toAST(cv)))
		})
		return obj
	case fastjson.TypeArray:
		items, _ := v.Array()
		terms := make([]*ast.Term, len(items))
		for i, item := range items {
			terms[i] = ast.NewTerm(toAST(item))
		}
		return ast.NewArray(terms...)
	case fastjson.TypeString:
		b, _ := v.StringBytes()
		return ast.String(b)
	case fastjson.TypeNumber:
		return ast.Number(v.MarshalTo(nil))
	case fastjson.TypeTrue:
		return ast.Boolean(true)
	case fastjson.TypeFalse:
		return ast.Boolean(false)
	default:
		return ast.NullValue
	}
}

package engine

import (
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"
)

// decisionCacheSize bounds the decisions one snapshot remembers. The inputs
// of the shipped policies' residuals take a few dozen distinct values (kind,
// operation, subresource, the fence annotations, the user when exemptions
// are configured); a policy whose inputs never repeat just fills it up once.
const decisionCacheSize = 4096

// decisionCache remembers the admission decisions of one snapshot by their
// input. A snapshot's policy and data never change, so a deterministic
// policy decides the same input the same way every time. The key is that of
// the projected input (appendKey): it holds exactly what the policy reads,
// so requests that differ only in what the policy ignores (names, specs,
// managedFields, most annotations) share an entry, and a hit needs no AST
// at all.
type decisionCache struct {
	mu      sync.RWMutex
	entries map[string]AdmissionDecision
}

func newDecisionCache() *decisionCache {
	return &decisionCache{entries: map[string]AdmissionDecision{}}
}

// get returns the decision remembered for key. The decision's slices are
// shared with other callers and must not be modified.
func (c *decisionCache) get(key []byte) (AdmissionDecision, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	d, ok := c.entries[string(key)]
	return d, ok
}

// put remembers a decision; when the cache is full it starts over, which
// bounds its memory without bookkeeping on the read path.
func (c *decisionCache) put(key []byte, d AdmissionDecision) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= decisionCacheSize {
		c.entries = map[string]AdmissionDecision{}
	}
	c.entries[string(key)] = d
}

// deterministic reports whether the modules call no builtin whose result can
// change between two evaluations of the same input and data (time.now_ns,
// http.send, rand.intn, ...) and none with a side effect (print, trace):
// only then may their decisions be remembered.
func deterministic(modules map[string]*ast.Module) bool {
	ok := true
	check := func(operator *ast.Term) {
		name := operator.String()
		if b, found := ast.BuiltinMap[name]; found && b.Nondeterministic {
			ok = false
		}
		switch name {
		case "print", "internal.print", "trace":
			ok = false
		}
	}
	visitor := ast.NewGenericVisitor(func(x any) bool {
		switch x := x.(type) {
		case *ast.Expr:
			if x.IsCall() {
				check(x.OperatorTerm())
			}
		case ast.Call:
			check(x[0])
		}
		return !ok
	})
	for _, m := range modules {
		visitor.Walk(m)
	}
	return ok
}

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
// (projected) input. A snapshot's policy and data never change, so a
// deterministic policy decides the same input the same way every time; the
// projection holds exactly what the policy reads, so requests that differ
// only in what the policy ignores (names, specs, managedFields, most
// annotations) share an entry.
type decisionCache struct {
	mu      sync.RWMutex
	entries map[int][]cachedDecision
	size    int
}

type cachedDecision struct {
	input    ast.Value
	decision AdmissionDecision
}

func newDecisionCache() *decisionCache {
	return &decisionCache{entries: map[int][]cachedDecision{}}
}

// get returns the decision remembered for input. The decision's slices are
// shared with other callers and must not be modified.
func (c *decisionCache) get(input ast.Value) (AdmissionDecision, bool) {
	h := input.Hash()
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, e := range c.entries[h] {
		if e.input.Compare(input) == 0 {
			return e.decision, true
		}
	}
	return AdmissionDecision{}, false
}

// put remembers a decision; when the cache is full it starts over, which
// bounds its memory without bookkeeping on the read path.
func (c *decisionCache) put(input ast.Value, d AdmissionDecision) {
	h := input.Hash()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.size >= decisionCacheSize {
		c.entries, c.size = map[int][]cachedDecision{}, 0
	}
	c.entries[h] = append(c.entries[h], cachedDecision{input: input, decision: d})
	c.size++
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

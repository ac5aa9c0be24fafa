package hold

import (
	"encoding/json"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
)

// patcher builds a JSON patch against a copy of an object, applying each
// operation to the copy as it adds it, so that later operations see the
// earlier ones (a parent made, the record removed).
type patcher struct {
	obj map[string]any
	ops []Op
}

func newPatcher(obj map[string]any) *patcher {
	p := &patcher{obj: runtime.DeepCopyJSON(obj)}
	if rv, ok := lookup(obj, []string{"metadata", "resourceVersion"}); ok {
		p.ops = append(p.ops, Op{Op: "test", Path: "/metadata/resourceVersion", Value: rv})
	}
	return p
}

// set sets path to the JSON value raw, making the parents that are absent.
func (p *patcher) set(path []string, raw json.RawMessage) {
	for n := 1; n < len(path); n++ {
		if _, ok := lookup(p.obj, path[:n]); !ok {
			p.add(path[:n], map[string]any{})
		}
	}
	var v any
	_ = json.Unmarshal(raw, &v) // raw was encoded by json.Marshal
	p.add(path, v)
}

func (p *patcher) add(path []string, v any) {
	// The operation keeps a copy: later operations change the copy's
	// value in place (a parent made here gains its field).
	p.ops = append(p.ops, Op{Op: "add", Path: pointer(path), Value: runtime.DeepCopyJSONValue(v)})
	parent, _ := lookupObject(p.obj, path[:len(path)-1])
	parent[path[len(path)-1]] = v
}

// remove removes path when it is present.
func (p *patcher) remove(path []string) {
	parent, ok := lookupObject(p.obj, path[:len(path)-1])
	if !ok {
		return
	}
	if _, ok := parent[path[len(path)-1]]; !ok {
		return
	}
	p.ops = append(p.ops, Op{Op: "remove", Path: pointer(path)})
	delete(parent, path[len(path)-1])
}

// setRecord writes rec into the record annotation.
func (p *patcher) setRecord(rec *Record) error {
	text, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	value, err := json.Marshal(string(text))
	if err != nil {
		return err
	}
	p.set(recordPath, value)
	return nil
}

// absentParents counts the parents of path that the object lacks.
func (p *patcher) absentParents(path []string) int {
	n := 0
	for i := len(path) - 1; i >= 1; i-- {
		if _, ok := lookup(p.obj, path[:i]); ok {
			break
		}
		n++
	}
	return n
}

// lookup returns the value at path, and whether there is one.
func lookup(obj map[string]any, path []string) (any, bool) {
	var v any = obj
	for _, s := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[s]; !ok {
			return nil, false
		}
	}
	return v, true
}

// lookupObject returns the object at path.
func lookupObject(obj map[string]any, path []string) (map[string]any, bool) {
	v, ok := lookup(obj, path)
	if !ok {
		return nil, false
	}
	m, ok := v.(map[string]any)
	return m, ok
}

// pointer is path as a JSON pointer (RFC 6901).
func pointer(path []string) string {
	var b strings.Builder
	for _, s := range path {
		b.WriteByte('/')
		b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(s))
	}
	return b.String()
}

// soleOwner reports whether manager is the only field manager of the
// object's main resource that owns path (metadata.managedFields).
func soleOwner(obj map[string]any, path []string, manager string) bool {
	entries, _ := lookup(obj, []string{"metadata", "managedFields"})
	list, _ := entries.([]any)
	mine := false
	for _, raw := range list {
		e, ok := raw.(map[string]any)
		if !ok {
			continue
		}
		if sub, _ := e["subresource"].(string); sub != "" {
			continue
		}
		fields, _ := e["fieldsV1"].(map[string]any)
		if !owns(fields, path) {
			continue
		}
		if e["manager"] != manager {
			return false
		}
		mine = true
	}
	return mine
}

// owns reports whether a managedFields entry's fieldsV1 set holds path.
func owns(fields map[string]any, path []string) bool {
	for _, s := range path {
		next, ok := fields["f:"+s].(map[string]any)
		if !ok {
			return false
		}
		fields = next
	}
	return true
}

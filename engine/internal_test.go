package engine

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/valyala/fastjson"

	"github.com/fencegate/fencegate/fencestate"
)

// render prints a path tree as sorted paths; "path:type" marks a value of
// which only the type (and the members listed below it) is read.
func (t *pathTree) render() string {
	var paths []string
	var walk func(prefix string, n *pathTree)
	walk = func(prefix string, n *pathTree) {
		switch {
		case n.all:
			paths = append(paths, prefix)
		case len(n.children) == 0:
			paths = append(paths, prefix+":type")
		}
		for _, k := range slices.Sorted(maps.Keys(n.children)) {
			walk(prefix+"."+k, n.children[k])
		}
	}
	walk("input", t)
	return strings.Join(paths, " ")
}

func TestInputPaths(t *testing.T) {
	tests := map[string]struct {
		rules string
		want  string
	}{
		"fields": {
			rules: `a if input.request.operation == "CREATE"
b if input.request.userInfo.username == "x"`,
			want: "input.request.operation input.request.userInfo.username",
		},
		"iteration reads the collection": {
			rules: `a if { some g in input.request.userInfo.groups; g == "x" }
b if input.request.userInfo.groups[_] == "y"`,
			want: "input.request.userInfo.groups",
		},
		"a variable key reads the whole object": {
			rules: `a if { k := "x"; input.request.object.metadata.labels[k] }`,
			want:  "input.request.object.metadata.labels",
		},
		"a reference inside a reference": {
			rules: `a if input.request.object.metadata.labels[input.request.name]`,
			want:  "input.request.name input.request.object.metadata.labels",
		},
		"a whole subtree": {
			rules: `a if count(input.request.object) > 0
b if input.request.object.metadata.name == "x"`,
			want: "input.request.object",
		},
		"bare input reads everything": {
			rules: `a if f(input)
f(x) if x.request`,
			want: "input",
		},
		"a type check reads the type": {
			rules: `a if is_object(input.request.object.metadata.annotations)`,
			want:  "input.request.object.metadata.annotations:type",
		},
		"object.get with a key reads that member": {
			rules: `a if object.get(input.request.object.metadata.annotations, "x/y", null) != "1"
b if is_object(input.request.object.metadata.annotations)`,
			want: "input.request.object.metadata.annotations.x/y",
		},
		"object.get with a path of keys": {
			rules: `a if object.get(input.request, ["object", "metadata", "name"], "") == "x"`,
			want:  "input.request.object.metadata.name",
		},
		"object.get with a number in the path": {
			rules: `a if object.get(input.request, ["object", 0, "name"], "") == "x"`,
			want:  "input.request.object",
		},
		"object.get with a variable key": {
			rules: `a if { some k in ["x"]; object.get(input.request.object.metadata.labels, k, null) }`,
			want:  "input.request.object.metadata.labels",
		},
		"object.get with a constant key that is not a string": {
			rules: `a if object.get(input.request.object, 1, null) == null`,
			want:  "input.request.object:type",
		},
		"object.get on a reference with a variable": {
			rules: `a if { some i; object.get(input.items[i], "x", null) }`,
			want:  "input.items",
		},
		// The compiler takes a call's arguments out into locals, and partial
		// evaluation's support rules keep them.
		"a local naming part of input": {
			rules: `a if { __local1__ = input.request.object; object.get(__local1__, ["metadata", "name"], null) == "x" }
b if { __local1__ = input.request.old; is_object(__local1__) }`,
			want: "input.request.object.metadata.name input.request.old:type",
		},
		"a local assigned twice reads both": {
			rules: `a if { __local1__ = input.request.a; __local1__ = input.request.b; is_string(__local1__) }`,
			want:  "input.request.a input.request.b",
		},
		"a local with a variable key binds the key": {
			rules: `a if { some k; __local1__ = input.request.labels[k]; is_string(__local1__); k == "x" }`,
			want:  "input.request.labels",
		},
		"a local in the rule's head": {
			rules: `a := __local1__ if { __local1__ = input.request.object; is_object(__local1__) }`,
			want:  "input.request.object",
		},
		"a local used nowhere else still needs its value": {
			rules: `a if { __local1__ = input.request.dryRun }`,
			want:  "input.request.dryRun:type",
		},
		"a type check replaced by a function reads its argument": {
			rules: `a if { __local1__ = input.request.object; is_object(__local1__) with is_object as f }
b if object.get(input.request.old, "x", null)
f(x) if x.spec.enabled`,
			want: "input.request.object input.request.old",
		},
		"a local compared in a comprehension": {
			rules: `a if { __local1__ = input.request.object; is_object(__local1__); [1 | __local1__ = input.request.old] }`,
			want:  "input.request.object input.request.old",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			src := "package p\n\n" + tc.rules + "\n"
			// Both the parsed modules (what partial evaluation writes) and
			// the compiled ones must give a sound answer.
			parsed := map[string]*ast.Module{"p.rego": ast.MustParseModuleWithOpts(src, ast.ParserOptions{RegoVersion: ast.RegoV1})}
			if got := inputPathsOf(parsed).render(); got != tc.want {
				t.Errorf("paths = %q, want %q", got, tc.want)
			}
			compiled := ast.MustCompileModulesWithOpts(map[string]string{"p.rego": src}, ast.CompileOpts{ParserOptions: ast.ParserOptions{RegoVersion: ast.RegoV1}})
			paths := inputPathsOf(compiled.Modules)
			if !covers(paths, inputPathsOf(parsed)) {
				t.Errorf("compiled paths %q do not cover parsed paths %q", paths.render(), tc.want)
			}
		})
	}
}

func TestProject(t *testing.T) {
	tree := &pathTree{}
	tree.add([]string{"request", "operation"})
	tree.touch([]string{"request", "object", "metadata", "annotations"})
	tree.add([]string{"request", "object", "metadata", "annotations", "a"})
	tree.add([]string{"request", "userInfo"})
	tree.seal()
	tests := map[string]struct {
		body string
		want string
	}{
		"only what is read": {
			body: `{"request":{"operation":"CREATE","uid":"1","userInfo":{"username":"u","groups":["g"]},
				"object":{"metadata":{"name":"n","annotations":{"a":"1","b":"2"}},"spec":{}}}}`,
			want: `{"request": {"object": {"metadata": {"annotations": {"a": "1"}}}, "operation": "CREATE", "userInfo": {"groups": ["g"], "username": "u"}}}`,
		},
		"an object keeps its type without members": {
			body: `{"request":{"object":{"metadata":{"annotations":{"b":"2"}}}}}`,
			want: `{"request": {"object": {"metadata": {"annotations": {}}}}}`,
		},
		"other values are kept whole": {
			body: `{"request":{"object":{"metadata":{"annotations":["a"]}},"operation":{"x":[1,2.5,true,null]}}}`,
			want: `{"request": {"object": {"metadata": {"annotations": ["a"]}}, "operation": {"x": [1, 2.5, true, null]}}}`,
		},
		"the last of repeated keys wins": {
			body: `{"request":{"operation":"DELETE","operation":"CREATE"}}`,
			want: `{"request": {"operation": "CREATE"}}`,
		},
		"escaped keys and strings": {
			body: `{"request":{"oper\u0061tion":"C\"R\u00e9"}}`,
			want: `{"request": {"operation": "C\"Ré"}}`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var p fastjson.Parser
			v, err := p.Parse(tc.body)
			if err != nil {
				t.Fatal(err)
			}
			if got := project(v, tree).String(); got != tc.want {
				t.Errorf("projection = %s\nwant         %s", got, tc.want)
			}
		})
	}
}

// TestKeyIdentifiesProjection checks the decision cache's key: bodies with
// the same key have the same projection, and bodies that differ in what the
// tree reads have different keys.
func TestKeyIdentifiesProjection(t *testing.T) {
	tree := &pathTree{}
	tree.add([]string{"request", "operation"})
	tree.touch([]string{"request", "object", "metadata", "annotations"})
	tree.add([]string{"request", "object", "metadata", "annotations", "a"})
	tree.add([]string{"request", "groups"})
	tree.seal()
	bodies := []string{
		`{"request":{"operation":"CREATE"}}`,
		`{"request":{"operation":"CREATE","name":"other"}}`,
		`{"request":{"operation":"CREAT\u0045"}}`,
		`{"request":{"operation":"UPDATE"}}`,
		`{"request":{"operation":"CREATE","object":{"metadata":{"annotations":{}}}}}`,
		`{"request":{"operation":"CREATE","object":{"metadata":{"annotations":{"b":"1"}}}}}`,
		`{"request":{"operation":"CREATE","object":{"metadata":{"annotations":{"a":"1"}}}}}`,
		`{"request":{"operation":"CREATE","object":{"metadata":{"annotations":{"a":"1","a":"2"}}}}}`,
		`{"request":{"operation":"CREATE","object":{"metadata":{"annotations":{"a":"2"}}}}}`,
		`{"request":{"operation":"CREATE","object":{"metadata":{"annotations":null}}}}`,
		`{"request":{"operation":"CREATE","object":{"metadata":{"annotations":["a"]}}}}`,
		`{"request":{"operation":"CREATE","object":{"metadata":"annotations"}}}`,
		`{"request":{"operation":"CREATE","groups":["a","b"]}}`,
		`{"request":{"operation":"CREATE","groups":["ab"]}}`,
		`{"request":{"operation":"CREATE","groups":["a"],"x":1}}`,
		`{"request":{"operation":1}}`,
		`{"request":{"operation":1.0}}`,
		`{"request":[]}`,
		`{}`,
	}
	type keyed struct {
		key  string
		proj ast.Value
	}
	var all []keyed
	for _, body := range bodies {
		var p fastjson.Parser
		v, err := p.Parse(body)
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		all = append(all, keyed{string(appendKey(nil, v, tree)), project(v, tree)})
	}
	for i, a := range all {
		for j, b := range all {
			if a.key == b.key && a.proj.Compare(b.proj) != 0 {
				t.Errorf("%s and %s share a key but project to %v and %v", bodies[i], bodies[j], a.proj, b.proj)
			}
		}
	}
	// Bodies that differ only in what the tree does not read share a key:
	// that is what makes the cache hit.
	for _, pair := range [][2]int{{0, 1}, {4, 5}, {7, 8}} {
		if all[pair[0]].key != all[pair[1]].key {
			t.Errorf("%s and %s differ only in what is not read, but have different keys", bodies[pair[0]], bodies[pair[1]])
		}
	}
}

// compile compiles the files and the config as a load does, for the
// optimized admission path.
func compile(t *testing.T, files []policyFile, config map[string]any) *policy {
	t.Helper()
	revision, err := revisionOf(files, config)
	if err != nil {
		t.Fatal(err)
	}
	p, err := compilePolicy(policySource{files: files, config: config, revision: revision})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSnapshotOptimizations checks which optimizations a snapshot applies:
// the shipped policies get a self-contained residual, a narrow projection
// and a decision cache; a policy that calls a non-deterministic builtin gets
// no cache; one whose residual refers to the original rules is compiled with
// them.
func TestSnapshotOptimizations(t *testing.T) {
	shipped, err := readPolicyFiles("")
	if err != nil {
		t.Fatal(err)
	}
	with := func(name, src string) []policyFile {
		return append(slices.Clone(shipped), policyFile{name: name, content: []byte(src)})
	}
	fenced := &fencestate.State{Status: fencestate.Fenced, Domain: "default",
		Cluster: fencestate.Cluster{Name: "west", Epoch: 3}, Holder: fencestate.Cluster{Name: "east", Epoch: 7}}
	tests := map[string]struct {
		files        []policyFile
		wantCache    bool
		wantPaths    string
		wantOriginal bool
	}{
		"shipped": {
			files:     shipped,
			wantCache: true,
			wantPaths: "input.request.kind.group input.request.kind.kind input.request.object.metadata.annotations.fencegate.dev/fenced " +
				"input.request.object.metadata.annotations.fencegate.dev/fenced-by input.request.object.metadata.annotations.fencegate.dev/write-token " +
				"input.request.object.metadata.finalizers input.request.oldObject.metadata.annotations.fencegate.dev/write-token " +
				"input.request.oldObject.metadata.deletionTimestamp input.request.oldObject.metadata.finalizers " +
				"input.request.operation input.request.subResource",
		},
		"non-deterministic": {
			files: with("late.rego", `package fencegate.admission

allowed := false if {
	input.request.operation == "CREATE"
	time.now_ns() < 0
}
`),
			wantCache: false,
		},
		"comprehension over the request": {
			files: with("names.rego", `package fencegate.admission

warnings contains w if {
	names := [n | some n, _ in input.request.object.metadata.labels; n != data.fencegate.ownership.holder]
	w := concat(",", names)
	w != ""
}
`),
			wantCache:    true,
			wantOriginal: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := compile(t, tc.files, map[string]any{})
			s, err := newSnapshot(context.Background(), p, fenced, nil)
			if err != nil {
				t.Fatal(err)
			}
			if s.residualErr != nil {
				t.Fatalf("no residual: %v", s.residualErr)
			}
			if (s.cache != nil) != tc.wantCache {
				t.Errorf("cache = %v, want %v", s.cache != nil, tc.wantCache)
			}
			if tc.wantPaths != "" && s.inputPaths.render() != tc.wantPaths {
				t.Errorf("paths = %q\nwant    %q", s.inputPaths.render(), tc.wantPaths)
			}
			if tc.wantOriginal && !covers(s.inputPaths, p.inputPaths) {
				t.Errorf("residual paths %q do not cover the original's %q", s.inputPaths.render(), p.inputPaths.render())
			}
		})
	}
}

// TestResidualReuse checks that a fence write that changes nothing the
// policies read (a heartbeat moving valid_until_ns along) keeps the residual
// and its remembered decisions, and that any other change does not.
func TestResidualReuse(t *testing.T) {
	files, err := readPolicyFiles("")
	if err != nil {
		t.Fatal(err)
	}
	p := compile(t, files, map[string]any{})
	active := fencestate.State{Status: fencestate.Active, Domain: "default", Token: 1042, ValidUntilNS: 1e18,
		Cluster: fencestate.Cluster{Name: "east", Epoch: 7}, Holder: fencestate.Cluster{Name: "east", Epoch: 7}}
	first, err := newSnapshot(context.Background(), p, &active, nil)
	if err != nil {
		t.Fatal(err)
	}
	if first.residual == nil || !first.residual.pure || first.cache == nil {
		t.Fatalf("the shipped policies give no pure, cached residual: %v", first.residualErr)
	}
	tests := map[string]struct {
		change   func(*fencestate.State)
		policy   *policy
		wantSame bool
	}{
		"heartbeat": {change: func(s *fencestate.State) { s.ValidUntilNS += 5e9; s.LastSuccessNS += 5e9 }, wantSame: true},
		"new token": {change: func(s *fencestate.State) { s.Token++ }},
		"fenced":    {change: func(s *fencestate.State) { s.Status = fencestate.Fenced }},
		"another policy revision": {
			change: func(*fencestate.State) {},
			policy: compile(t, files, map[string]any{"enforcement": "warn"}),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			state := active
			tc.change(&state)
			pol := p
			if tc.policy != nil {
				pol = tc.policy
			}
			next, err := newSnapshot(context.Background(), pol, &state, first)
			if err != nil {
				t.Fatal(err)
			}
			if same := next.residual == first.residual && next.cache == first.cache; same != tc.wantSame {
				t.Errorf("residual kept = %v, want %v", same, tc.wantSame)
			}
		})
	}
}

func TestRelevantFileChanges(t *testing.T) {
	e := &Engine{policyDir: "/etc/fencegate/policies/", configFiles: []string{"/etc/fencegate/config/config.yaml"}}
	tests := map[string]struct {
		name string
		want bool
	}{
		"a policy file":                  {"/etc/fencegate/policies/admission.rego", true},
		"a policy's Rego test":           {"/etc/fencegate/policies/admission_test.rego", true},
		"the ConfigMap's ..data swap":    {"/etc/fencegate/policies/..data", true},
		"the ConfigMap's new data dir":   {"/etc/fencegate/config/..2026_11_30_10_00_00.123", true},
		"the config file":                {"/etc/fencegate/config/config.yaml", true},
		"a log file beside the config":   {"/etc/fencegate/config/fencegate.log", false},
		"an editor's swap file":          {"/etc/fencegate/policies/.admission.rego.swp", false},
		"a JSON file in the policy dir":  {"/etc/fencegate/policies/notes.json", false},
		"another config in the same dir": {"/etc/fencegate/config/other.yaml", false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := e.watchOptions(t.Context()).Wakes(tc.name); got != tc.want {
				t.Errorf("a change of %q wakes a reload: %v, want %v", tc.name, got, tc.want)
			}
		})
	}
}

func TestConflictingRules(t *testing.T) {
	tests := map[string]struct {
		rules string
		want  []string
	}{
		"two values on the request": {
			rules: `m := 1 if input.a
m := 2 if input.b`,
			want: []string{"data.p.m"},
		},
		"two values, one on the request": {
			rules: `m := 1 if input.a
m := 2 if data.fence.status == "fenced"`,
			want: []string{"data.p.m"},
		},
		"two values on the data alone": {
			rules: `m := 1 if data.fence.a
m := 2 if data.fence.b`,
		},
		"the same constant twice": {
			rules: `m := false if input.a
m := false if input.b`,
		},
		"a default and one value": {
			rules: `default m := 1
m := 2 if input.a`,
		},
		"one value of an iteration": {
			rules: `m := g if { some g in input.groups }`,
			want:  []string{"data.p.m"},
		},
		"through another rule": {
			rules: `m := 1 if a
m := 2 if data.fence.b
a if input.x`,
			want: []string{"data.p.m"},
		},
		"a function with two values": {
			rules: `f(x) := 1 if x > 0
f(x) := 2 if x < 10`,
			want: []string{"data.p.f"},
		},
		"an object built key by key": {
			rules: `o[k] := v if { some k, v in input.labels }`,
			want:  []string{"data.p.o"},
		},
		"sets never conflict": {
			rules: `s contains x if { some x in input.groups }`,
		},
		"else chains": {
			rules: `m := 1 if input.a
else := 2`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			compiler := ast.MustCompileModulesWithOpts(map[string]string{"p.rego": "package p\n\n" + tc.rules + "\n"},
				ast.CompileOpts{ParserOptions: ast.ParserOptions{RegoVersion: ast.RegoV1}})
			if got := conflictingRules(compiler); !slices.Equal(got, tc.want) {
				t.Errorf("conflicting rules = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRecentReviews(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	body := func(i int) []byte { return []byte(fmt.Sprintf(`{"n":%d}`, i)) }
	tests := map[string]struct {
		record func(r *recentReviews)
		want   []string
	}{
		"evaluated reviews are all kept, the last few": {
			record: func(r *recentReviews) {
				for i := range recentReviewsSize + 2 {
					r.record(body(i), true, start)
				}
			},
			want: []string{`{"n":2}`, `{"n":3}`, `{"n":4}`, `{"n":5}`, `{"n":6}`, `{"n":7}`, `{"n":8}`, `{"n":9}`},
		},
		"remembered decisions are kept at most once a second": {
			record: func(r *recentReviews) {
				r.record(body(0), false, start)
				r.record(body(1), false, start.Add(time.Second/2))
				r.record(body(2), false, start.Add(time.Second))
			},
			want: []string{`{"n":0}`, `{"n":2}`},
		},
		"large reviews are not kept": {
			record: func(r *recentReviews) {
				r.record(make([]byte, recentReviewMaxBytes+1), true, start)
				r.record(body(1), true, start)
			},
			want: []string{`{"n":1}`},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var r recentReviews
			tc.record(&r)
			var got []string
			for _, b := range r.list() {
				got = append(got, string(b))
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("kept %q, want %q", got, tc.want)
			}
		})
	}
}

// TestTransitionLeavesOtherDomains: a fence write of one domain replaces
// that domain's snapshot only; the others keep theirs, their residuals and
// remembered decisions included.
func TestTransitionLeavesOtherDomains(t *testing.T) {
	ctx := context.Background()
	e, err := New(Options{Domains: []string{"default", "payments", "search"}})
	if err != nil {
		t.Fatal(err)
	}
	state := func(d string, status fencestate.Status) fencestate.State {
		return fencestate.State{Status: status, Domain: d, Cluster: fencestate.Cluster{Name: "east", Epoch: 1}, Holder: fencestate.Cluster{Name: "west", Epoch: 2}}
	}
	for _, d := range []string{"default", "payments", "search"} {
		if err := e.WriteFence(ctx, state(d, fencestate.Fenced)); err != nil {
			t.Fatal(err)
		}
	}
	before := e.current.Load()
	if err := e.WriteFence(ctx, state("payments", fencestate.Active)); err != nil {
		t.Fatal(err)
	}
	after := e.current.Load()
	for _, d := range []string{"default", "search"} {
		if after.domains[d] != before.domains[d] {
			t.Errorf("domain %s's snapshot was rebuilt by payments' transition", d)
		}
	}
	if after.domains["payments"] == before.domains["payments"] || after.domains["payments"].fence.Status != fencestate.Active {
		t.Error("payments' snapshot does not hold its new state")
	}
	if after.unserved != before.unserved || after.policy != before.policy {
		t.Error("a fence write rebuilt the unserved snapshot or the policy")
	}
	if before.domains["payments"].fence.Status != fencestate.Fenced {
		t.Error("the view replaced was changed: views are immutable")
	}
}

// TestRenewedSnapshot checks the renewal path: the second renewal of a
// state whose residual ignores the renewed fields keeps the residual
// without partial evaluation and carries exactly the data a full build
// gives; a policy that reads those fields is never renewed that way.
func TestRenewedSnapshot(t *testing.T) {
	shipped, err := readPolicyFiles("")
	if err != nil {
		t.Fatal(err)
	}
	leaseAware := append(slices.Clone(shipped), policyFile{name: "lease.rego", content: []byte(`package fencegate.admission

warnings contains sprintf("lease until %d", [data.fence.valid_until_ns]) if input.request.operation == "UPDATE"
`)})
	tests := map[string]struct {
		files       []policyFile
		wantRenewed bool
	}{
		"shipped":     {files: shipped, wantRenewed: true},
		"lease-aware": {files: leaseAware},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := compile(t, tc.files, map[string]any{})
			state := fencestate.State{Status: fencestate.Active, Domain: "default", Token: 1042, ValidUntilNS: 1e18, LastSuccessNS: 9e17,
				Cluster: fencestate.Cluster{Name: "east", Epoch: 7}, Holder: fencestate.Cluster{Name: "east", Epoch: 7}}
			var snaps []*snapshot
			var prev *snapshot
			for range 3 {
				state.ValidUntilNS += 5e9
				state.LastSuccessNS += 5e9
				s, err := newSnapshot(context.Background(), p, &state, prev)
				if err != nil {
					t.Fatal(err)
				}
				snaps, prev = append(snaps, s), s
			}
			last := snaps[2]
			if renewed := last.residual == snaps[0].residual && last.renewable; renewed != tc.wantRenewed {
				t.Errorf("third write renewed the first residual: %v, want %v", renewed, tc.wantRenewed)
			}
			full, err := newSnapshot(context.Background(), p, &state, nil)
			if err != nil {
				t.Fatal(err)
			}
			if last.txn.data.Compare(full.txn.data) != 0 {
				t.Errorf("data after renewals:\n%v\nwant\n%v", last.txn.data, full.txn.data)
			}
			if !last.expiresAt.Equal(time.Unix(0, state.ValidUntilNS)) || last.fence != state {
				t.Errorf("renewed snapshot expires %v with state %+v, want %v and %+v", last.expiresAt, last.fence, time.Unix(0, state.ValidUntilNS), state)
			}
		})
	}
}

package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/engine/enginetest"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/policies"
)

func TestAdmitRequestErrors(t *testing.T) {
	valid := func(request string) string {
		return `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":` + request + `}`
	}
	tests := map[string]struct {
		body string
		want string
	}{
		"empty body":          {body: "", want: "the request body is empty"},
		"not JSON":            {body: "apiVersion: v1", want: "the request body is not valid JSON"},
		"truncated":           {body: `{"apiVersion":"admission.k8s.io/v1","kind":"Admission`, want: "not valid JSON"},
		"NaN":                 {body: `{"apiVersion":"admission.k8s.io/v1","x":NaN}`, want: "not valid JSON"},
		"trailing data":       {body: valid(`{"uid":"1"}`) + "{}", want: "not valid JSON"},
		"array":               {body: `[1,2]`, want: "the request body is a JSON array: want an AdmissionReview object"},
		"no apiVersion":       {body: `{"kind":"AdmissionReview"}`, want: "apiVersion (missing) is not supported"},
		"v1beta1":             {body: `{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"1"}}`, want: `apiVersion "admission.k8s.io/v1beta1" is not supported: send admission.k8s.io/v1`},
		"apiVersion a number": {body: `{"apiVersion":1,"kind":"AdmissionReview"}`, want: "apiVersion 1 is not supported"},
		"other kind":          {body: `{"apiVersion":"admission.k8s.io/v1","kind":"ConversionReview"}`, want: `kind "ConversionReview" is not supported: want AdmissionReview`},
		"no request":          {body: `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, want: "the AdmissionReview has no request"},
		"null request":        {body: valid("null"), want: "the AdmissionReview has no request"},
		"request a string":    {body: valid(`"x"`), want: "request is a JSON string: want an object"},
		"no uid":              {body: valid(`{"operation":"CREATE"}`), want: "the request has no uid"},
		"empty uid":           {body: valid(`{"uid":""}`), want: "the request has no uid"},
		"uid a number":        {body: valid(`{"uid":7}`), want: "request.uid is a JSON number: want a string"},
		"operation an object": {body: valid(`{"uid":"1","operation":{}}`), want: "request.operation is a JSON object: want a string"},
		"username a boolean":  {body: valid(`{"uid":"1","userInfo":{"username":true}}`), want: "request.userInfo.username is a JSON true: want a string"},
		"groups a string":     {body: valid(`{"uid":"1","userInfo":{"groups":"admins"}}`), want: "request.userInfo.groups is a JSON string: want a list of strings"},
		"group a number":      {body: valid(`{"uid":"1","userInfo":{"groups":["a",2]}}`), want: "request.userInfo.groups[1] is a JSON number: want a string"},
		"dryRun a string":     {body: valid(`{"uid":"1","dryRun":"yes"}`), want: "request.dryRun is a JSON string: want a boolean"},
	}
	e := newEngine(t, engine.Options{})
	writeFence(t, e, eastActive)
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := e.Admit(context.Background(), []byte(tc.body))
			var reqErr *engine.RequestError
			if !errors.As(err, &reqErr) {
				t.Fatalf("Admit = %v, want a *RequestError", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func TestAdmitDecodesTheRequest(t *testing.T) {
	e := newEngine(t, engine.Options{})
	writeFence(t, e, westFenced)
	body := enginetest.Review(t, engine.ReviewRequest{
		UID: "42", Operation: "UPDATE", SubResource: "status", DryRun: true,
		Object: enginetest.Component("billing", "payments", nil), OldObject: enginetest.Component("billing", "payments", nil),
		Username: "alice", Groups: []string{"developers", "sre"},
	})
	res, err := e.Admit(context.Background(), body)
	if err != nil {
		t.Fatal(err)
	}
	want := engine.AdmissionRequest{
		UID: "42", Operation: "UPDATE", Namespace: "payments", Name: "billing", SubResource: "status",
		Username: "alice", Groups: []string{"developers", "sre"}, DryRun: true,
	}
	if !reflect.DeepEqual(res.Request, want) {
		t.Errorf("request = %+v, want %+v", res.Request, want)
	}
	if res.Fence != westFenced || res.Revision != e.Revision() {
		t.Errorf("result fence %+v revision %q; want %+v %q", res.Fence, res.Revision, westFenced, e.Revision())
	}
}

// equivalenceCase is one request of the equivalence table.
type equivalenceCase struct {
	name string
	body []byte
}

// equivalenceRequests spans what the policies look at: kinds, operations,
// the status subresource, users, groups, namespaces, dry-run and every shape
// of the annotations map.
func equivalenceRequests(t testing.TB) []equivalenceCase {
	annotations := map[string]map[string]string{
		"none":    nil,
		"empty":   {},
		"user":    {"team": "payments", "a/b~c": "x"},
		"current": {"fencegate.dev/epoch": "7", "fencegate.dev/token": "1042"},
		"stale":   {"fencegate.dev/epoch": "6", "fencegate.dev/token": "9", "fencegate.dev/fenced": "true", "fencegate.dev/fenced-by": "east@7"},
		"marked":  {"fencegate.dev/fenced": "true", "fencegate.dev/fenced-by": "east@7"},
		// Write tokens a gated writer asserts: the fence's own, an older
		// one, and one that is no token.
		"write current":   {"fencegate.dev/write-token": "1042", "team": "payments"},
		"write stale":     {"fencegate.dev/write-token": "1041", "fencegate.dev/token": "1041"},
		"write malformed": {"fencegate.dev/write-token": "-1"},
	}
	users := map[string]struct {
		name   string
		groups []string
	}{
		"alice":      {"alice", []string{"developers", "system:authenticated"}},
		"controller": {"system:serviceaccount:fencegate:fencegate", []string{"system:serviceaccounts"}},
		"exempt":     {"root-admin", nil},
		"breakglass": {"bob", []string{"break-glass"}},
	}
	var cases []equivalenceCase
	i := 0
	for _, op := range []string{"CREATE", "UPDATE", "DELETE"} {
		for _, sub := range []string{"", "status"} {
			for userName, user := range users {
				for annName, ann := range annotations {
					i++
					ns := "default"
					if i%5 == 0 {
						ns = "sandbox"
					}
					obj := enginetest.Component("billing", ns, ann)
					r := engine.ReviewRequest{
						UID: fmt.Sprint(i), Operation: op, SubResource: sub, Username: user.name, Groups: user.groups,
						DryRun: i%3 == 0,
					}
					switch op {
					case "CREATE":
						r.Object = obj
					case "UPDATE":
						r.Object, r.OldObject = obj, enginetest.Component("billing", ns, nil)
						if strings.HasPrefix(annName, "write") {
							// The write token stored already and sent
							// back: no assertion.
							stored := r
							stored.OldObject = obj
							cases = append(cases, equivalenceCase{
								name: fmt.Sprintf("%s%s/%s/%s stored/%s", op, sub, userName, annName, ns),
								body: enginetest.Review(t, stored),
							})
						}
					case "DELETE":
						r.OldObject = obj
					}
					cases = append(cases, equivalenceCase{
						name: fmt.Sprintf("%s%s/%s/%s/%s", op, sub, userName, annName, ns),
						body: enginetest.Review(t, r),
					})
				}
			}
		}
	}
	configMap := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "c", "namespace": "default"}}
	raw, _ := json.Marshal(configMap)
	cases = append(cases,
		equivalenceCase{"ConfigMap", enginetest.Review(t, engine.ReviewRequest{Operation: "CREATE", Object: raw})},
		equivalenceCase{"no userInfo", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","operation":"CREATE",` +
			`"kind":{"group":"components.fencegate.dev","kind":"Component"},"object":{"metadata":{"annotations":null}}}}`)},
		equivalenceCase{"annotations a string", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","operation":"UPDATE",` +
			`"kind":{"group":"components.fencegate.dev","kind":"Component"},"object":{"metadata":{"annotations":"x"}}}}`)},
		equivalenceCase{"duplicate keys", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","operation":"DELETE","operation":"CREATE",` +
			`"kind":{"group":"components.fencegate.dev","kind":"Component"},"object":{"metadata":{"annotations":{"fencegate.dev/epoch":"1","fencegate.dev/epoch":"7"}}}}}`)},
		equivalenceCase{"large update", enginetest.LargeUpdate(t)},
	)
	// A kind the config may fence beside Components: a person's writes,
	// and the hold controller's patches, which name their field manager.
	cronJob := []byte(`{"apiVersion":"batch/v1","kind":"CronJob","metadata":{"name":"report","namespace":"default"},"spec":{"suspend":false}}`)
	held := []byte(`{"apiVersion":"batch/v1","kind":"CronJob","metadata":{"name":"report","namespace":"default"},"spec":{"suspend":true}}`)
	cronJobStored := []byte(`{"apiVersion":"batch/v1","kind":"CronJob","metadata":{"name":"report","namespace":"default","annotations":{"fencegate.dev/write-token":"5"}},"spec":{"suspend":false}}`)
	heldStored := []byte(`{"apiVersion":"batch/v1","kind":"CronJob","metadata":{"name":"report","namespace":"default","annotations":{"fencegate.dev/write-token":"5"}},"spec":{"suspend":true}}`)
	for _, c := range []struct {
		name string
		r    engine.ReviewRequest
	}{
		{"CronJob created", engine.ReviewRequest{Operation: "CREATE", Object: cronJob, Username: "alice"}},
		{"CronJob edited", engine.ReviewRequest{Operation: "UPDATE", Object: cronJob, OldObject: held, Username: "alice"}},
		{"CronJob held", engine.ReviewRequest{Operation: "UPDATE", Object: held, OldObject: cronJob, Username: "system:serviceaccount:fencegate:fencegate", FieldManager: "fencegate-hold"}},
		{"CronJob held by an impostor", engine.ReviewRequest{Operation: "UPDATE", Object: held, OldObject: cronJob, Username: "alice", FieldManager: "fencegate-hold"}},
		{"CronJob deleted", engine.ReviewRequest{Operation: "DELETE", OldObject: cronJob, Username: "alice"}},
		// A write token stored by a write no webhook saw, sent back by the
		// hold controller's patch, by a person, and changed by a writer.
		{"CronJob with a stored write token held", engine.ReviewRequest{Operation: "UPDATE", Object: heldStored, OldObject: cronJobStored, Username: "system:serviceaccount:fencegate:fencegate", FieldManager: "fencegate-hold"}},
		{"CronJob with a stored write token edited", engine.ReviewRequest{Operation: "UPDATE", Object: cronJobStored, OldObject: heldStored, Username: "alice"}},
		{"CronJob write token changed", engine.ReviewRequest{Operation: "UPDATE", Object: cronJobStored, OldObject: cronJob, Username: "alice"}},
	} {
		cases = append(cases, equivalenceCase{c.name, enginetest.Review(t, c.r)})
	}
	return cases
}

// customPolicies are policies of an operator's own that read the whole
// object, use a comprehension over the request (which partial evaluation
// leaves referring to the original rules) and call a non-deterministic
// builtin.
var customPolicies = map[string]string{
	"object.rego": `package fencegate.custom

import rego.v1

labelled if input.request.object.metadata.labels.team
`,
	"admission.rego": `package fencegate.admission

import data.fencegate.custom
import rego.v1

default allowed := true

allowed := false if {
	data.fence.status != "active"
	input.request.operation != "DELETE"
	not custom.labelled
}

decision := {
	"allowed": allowed,
	"reasons": [r | some r in ["denied"]; not allowed],
	"warnings": [w | some k, _ in input.request.object.metadata.annotations; w := concat(": ", ["annotation", k])],
	"patch": [],
	"violations": [],
}
`,
	"clock.rego": `package fencegate.clock

import rego.v1

late if time.now_ns() > 0
`,
}

// pair is an engine and the reference evaluator over the same policies,
// config and fence state.
type pair struct {
	engine    *engine.Engine
	reference *enginetest.Reference
}

// newPair builds both from the shipped policies plus extra (file name →
// Rego), and config (JSON, empty for none).
func newPair(t testing.TB, extra map[string]string, config string) pair {
	t.Helper()
	var opts engine.Options
	configDoc := map[string]any{}
	if config != "" {
		opts.ConfigFile = writeTemp(t, "config.json", config)
		dec := json.NewDecoder(strings.NewReader(config))
		dec.UseNumber()
		if err := dec.Decode(&configDoc); err != nil {
			t.Fatal(err)
		}
	}
	modules, err := policies.Shipped()
	if err != nil {
		t.Fatal(err)
	}
	if len(extra) > 0 {
		dir := enginetest.CopyPolicies(t)
		for name, src := range extra {
			writeFile(t, filepath.Join(dir, name), src)
			modules[name] = []byte(src)
		}
		opts.PolicyDir = dir
	}
	ref, err := enginetest.NewReference(context.Background(), modules, configDoc)
	if err != nil {
		t.Fatal(err)
	}
	return pair{engine: newEngine(t, opts), reference: ref}
}

func (p pair) writeFence(t testing.TB, state fencestate.State) {
	t.Helper()
	writeFence(t, p.engine, state)
	if err := p.reference.WriteFence(context.Background(), state); err != nil {
		t.Fatal(err)
	}
}

// compare decides body with both and reports how they differ: whenever the
// engine decodes the body as an AdmissionReview, it must decide it as the
// reference does, or fail where the reference fails.
func (p pair) compare(body []byte) error {
	got, gotErr := p.engine.Admit(context.Background(), body)
	if errors.As(gotErr, new(*engine.RequestError)) {
		return nil
	}
	want, wantErr := p.reference.Admit(context.Background(), body)
	switch {
	case (gotErr == nil) != (wantErr == nil):
		return fmt.Errorf("errors differ: engine %w, reference %w", gotErr, wantErr)
	case gotErr == nil && !reflect.DeepEqual(got.Decision, want):
		return fmt.Errorf("decisions differ\nreference: %+v\nengine:    %+v", want, got.Decision)
	}
	return nil
}

// TestAdmitAsTheReference checks that the fast path (partial evaluation,
// projected input, remembered decisions) decides exactly as OPA evaluating
// the whole policy with the whole AdmissionReview does, for every fence
// status and config, and for policies that defeat each optimization.
func TestAdmitAsTheReference(t *testing.T) {
	states := map[string]fencestate.State{
		"active":          eastActive,
		"fenced":          westFenced,
		"epoch regressed": enginetest.Fence(fencestate.EpochRegressed, "west", 3, "east", 7),
		"acquiring":       enginetest.Fence(fencestate.Acquiring, "west", 8, "east", 7),
		"unknown":         enginetest.Fence(fencestate.Unknown, "west", 3, "", 0),
		"unsupported":     enginetest.Fence(fencestate.Unsupported, "west", 3, "", 0),
	}
	configs := map[string]string{
		"defaults": "",
		"deny":     denyConfig,
		"warn":     `{"enforcement": "warn", "exempt_groups": ["break-glass"], "controller_users": ["system:serviceaccount:fencegate:fencegate"], "fenced_kinds": [{"group": "batch", "kind": "CronJob"}]}`,
		"dryrun":   `{"enforcement": "dryrun", "exempt_users": ["root-admin"]}`,
	}
	policySets := map[string]map[string]string{"shipped": nil, "custom": customPolicies}
	requests := equivalenceRequests(t)
	for configName, config := range configs {
		for policyName, extra := range policySets {
			p := newPair(t, extra, config)
			for stateName, state := range states {
				p.writeFence(t, state)
				t.Run(policyName+"/"+configName+"/"+stateName, func(t *testing.T) {
					// Twice: the second round is answered from remembered
					// decisions where the policy allows it.
					for round := range 2 {
						for _, rc := range requests {
							if err := p.compare(rc.body); err != nil {
								t.Fatalf("round %d, %s: %v", round, rc.name, err)
							}
						}
					}
				})
			}
		}
	}
}

func writeTemp(t testing.TB, name, content string) string {
	t.Helper()
	path := t.TempDir() + "/" + name
	writeFile(t, path, content)
	return path
}

// FuzzAdmit feeds arbitrary bodies to the admission path: it must never
// panic, and whenever it decodes a body as an AdmissionReview, it must
// decide as the reference evaluator does.
func FuzzAdmit(f *testing.F) {
	for _, rc := range equivalenceRequests(f) {
		f.Add(rc.body)
	}
	for _, seed := range []string{
		"", "null", "{}", "[]", `"x"`, "1e999", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1"}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","kind":{"group":"components.fencegate.dev","kind":"Component"},"operation":"CREATE","object":{"metadata":{"annotations":{"fencegate.dev/epoch":1e400}}}}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"\u0000","userInfo":{"groups":[]},"object":[[[[[]]]]]}}`,
	} {
		f.Add([]byte(seed))
	}
	// The defaults, and a config whose every key the policies read.
	pairs := []pair{newPair(f, nil, ""), newPair(f, nil, denyConfig)}
	for _, p := range pairs {
		p.writeFence(f, westFenced)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, p := range pairs {
			if err := p.compare(body); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// denyConfig sets every config key the admission policy reads, with
// enforcement deny.
const denyConfig = `{"enforcement": "deny", "exempt_users": ["root-admin"], "exempt_groups": ["break-glass"],
	"exempt_namespaces": ["sandbox"], "controller_users": ["system:serviceaccount:fencegate:fencegate"], "fenced_kinds": [{"group": "batch", "kind": "CronJob"}]}`

// TestNarrowLookingReadsAsTheReference checks policies whose reads of the
// input look narrower than they are: a local the policy never uses again,
// which still needs its value to be there, and a type check replaced by a
// function that reads the whole value (in the rule, or around a rule that
// calls it). Each pair of requests differs only in what such a read sees,
// so a projection or a remembered decision that misses it decides one of
// them wrongly.
func TestNarrowLookingReadsAsTheReference(t *testing.T) {
	const unused = `package fencegate.admission

default allowed := true

allowed := false if { x := input.request.dryRun }

decision := {"allowed": allowed, "reasons": [], "warnings": [], "patch": [], "violations": []}
`
	const mockElse = `package fencegate.admission

allowed := false if {
	x := input.request.object
	is_object(x) with is_object as disabled
} else := true

disabled(o) if o.spec.enabled == false

decision := {"allowed": allowed, "reasons": [], "warnings": [], "patch": [], "violations": []}
`
	const mockOuter = `package fencegate.admission

allowed := false if {
	typed with is_object as disabled
} else := true

typed if is_object(input.request.object)

disabled(o) if o.spec.enabled == false

decision := {"allowed": allowed, "reasons": [], "warnings": [], "patch": [], "violations": []}
`
	const head = `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","operation":"UPDATE","kind":{"group":"components.fencegate.dev","kind":"Component"},`
	for name, tc := range map[string]struct {
		policy string
		bodies []string
	}{
		"unused local": {unused, []string{
			head + `"object":{}}}`,
			head + `"dryRun":true,"object":{}}}`,
		}},
		"type check mocked around": {mockOuter, []string{
			head + `"object":{"spec":{"enabled":true}}}}`,
			head + `"object":{"spec":{"enabled":false}}}}`,
		}},
		"mocked type check": {mockElse, []string{
			head + `"object":{"spec":{"enabled":true}}}}`,
			head + `"object":{"spec":{"enabled":false}}}}`,
		}},
	} {
		t.Run(name, func(t *testing.T) {
			p := newPair(t, map[string]string{"admission.rego": tc.policy}, "")
			p.writeFence(t, westFenced)
			for _, body := range tc.bodies {
				if err := p.compare([]byte(body)); err != nil {
					t.Errorf("%s: %v", body, err)
				}
			}
		})
	}
}

// leaseAwarePolicies read the fields a renewal moves: every renewal must
// give them new decisions, never the remembered ones.
var leaseAwarePolicies = map[string]string{
	"lease.rego": `package fencegate.admission

import rego.v1

warnings contains sprintf("lease until %d, last answer %d", [data.fence.valid_until_ns, data.fence.last_success_ns]) if {
	input.request.operation == "UPDATE"
}
`,
}

// TestRenewalsDecideAsTheReference checks that renewals, which after the
// first reuse the residual and remembered decisions without partial
// evaluation, leave every admission and reconcile decision as the reference
// makes it with the renewed data.fence, for policies that ignore the
// renewed fields and for ones that read them.
func TestRenewalsDecideAsTheReference(t *testing.T) {
	component := map[string]any{
		"apiVersion": "components.fencegate.dev/v1alpha1", "kind": "Component",
		"metadata": map[string]any{"name": "billing", "namespace": "default"},
		"spec":     map[string]any{"enabled": true},
	}
	requests := equivalenceRequests(t)
	for name, extra := range map[string]map[string]string{"shipped": nil, "custom": customPolicies, "lease-aware": leaseAwarePolicies} {
		t.Run(name, func(t *testing.T) {
			p := newPair(t, extra, "")
			state := eastActive
			state.ValidUntilNS, state.LastSuccessNS = 1<<62, 1<<61
			for renewal := range 4 {
				state.ValidUntilNS += 1e9
				state.LastSuccessNS += 1e9
				p.writeFence(t, state)
				for _, rc := range requests {
					if err := p.compare(rc.body); err != nil {
						t.Fatalf("renewal %d, %s: %v", renewal, rc.name, err)
					}
				}
				got, err := p.engine.Reconcile(context.Background(), "default", component)
				if err != nil {
					t.Fatal(err)
				}
				want, err := p.reference.Reconcile(context.Background(), component)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("renewal %d: reconcile decisions differ\nreference: %+v\nengine:    %+v", renewal, want, got)
				}
				if f, _ := p.engine.Fence("default"); f != state {
					t.Fatalf("renewal %d: the engine's fence state %+v, want %+v", renewal, f, state)
				}
			}
		})
	}
}

// TestStoredWriteTokensAssertNothing checks that only a write token the
// request changes is checked: one stored earlier (by a write no webhook
// saw) and sent back unchanged is no assertion, so that after a failover
// (the fence's token now above it) the object can still be changed, and
// fencegate's hold patches are never refused for a token.
func TestStoredWriteTokensAssertNothing(t *testing.T) {
	const hold = "system:serviceaccount:fencegate:fencegate"
	config := `{"controller_users": ["` + hold + `"], "fenced_kinds": [{"group": "batch", "kind": "CronJob"}]}`
	e := newEngine(t, engine.Options{ConfigFile: writeTemp(t, "config.json", config)})
	token := func(v string) map[string]string { return map[string]string{"fencegate.dev/write-token": v} }
	cronJob := func(suspend bool, annotations map[string]string) []byte {
		meta := map[string]any{"name": "report", "namespace": "default"}
		if annotations != nil {
			meta["annotations"] = annotations
		}
		raw, err := json.Marshal(map[string]any{"apiVersion": "batch/v1", "kind": "CronJob", "metadata": meta, "spec": map[string]any{"suspend": suspend}})
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	removeToken := engine.PatchOperation{Op: "remove", Path: "/metadata/annotations/fencegate.dev~1write-token"}
	stale := fmt.Sprint(enginetest.Token - 1)
	tests := map[string]struct {
		fence       fencestate.State
		request     engine.ReviewRequest
		wantAllowed bool
		wantReason  string
		// wantRemoved: the patch removes the write token.
		wantRemoved bool
	}{
		"a person's update sends back a stored stale token": {
			fence: eastActive,
			request: engine.ReviewRequest{Operation: "UPDATE", Username: "alice",
				Object: enginetest.Component("billing", "default", token(stale)), OldObject: enginetest.Component("billing", "default", token(stale))},
			wantAllowed: true, wantRemoved: true,
		},
		"the hold controller holds a CronJob with a stored stale token on a fenced cluster": {
			fence: westFenced,
			request: engine.ReviewRequest{Operation: "UPDATE", Username: hold, FieldManager: "fencegate-hold",
				Object: cronJob(true, token("5")), OldObject: cronJob(false, token("5"))},
			wantAllowed: true,
		},
		"the hold controller releases it on the holder": {
			fence: eastActive,
			request: engine.ReviewRequest{Operation: "UPDATE", Username: hold, FieldManager: "fencegate-hold",
				Object: cronJob(false, token("5")), OldObject: cronJob(true, token("5"))},
			wantAllowed: true,
		},
		"a gated write asserts a stale token": {
			fence: eastActive,
			request: engine.ReviewRequest{Operation: "UPDATE", Username: "alice",
				Object: enginetest.Component("billing", "default", token(stale)), OldObject: enginetest.Component("billing", "default", nil)},
			wantReason: "STALE_FENCING_TOKEN",
		},
		"a gated write replaces a stored token with a stale one": {
			fence: eastActive,
			request: engine.ReviewRequest{Operation: "UPDATE", Username: "alice",
				Object: enginetest.Component("billing", "default", token(stale)), OldObject: enginetest.Component("billing", "default", token("5"))},
			wantReason: "STALE_FENCING_TOKEN",
		},
		"a gated create asserts the current token": {
			fence: eastActive,
			request: engine.ReviewRequest{Operation: "CREATE", Username: "alice",
				Object: enginetest.Component("billing", "default", token(fmt.Sprint(enginetest.Token)))},
			wantAllowed: true, wantRemoved: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			writeFence(t, e, tc.fence)
			res, err := e.Admit(context.Background(), enginetest.Review(t, tc.request))
			if err != nil {
				t.Fatal(err)
			}
			d := res.Decision
			if d.Allowed != tc.wantAllowed || d.Reason != tc.wantReason {
				t.Fatalf("allowed %v reason %q (%v); want %v %q", d.Allowed, d.Reason, d.Reasons, tc.wantAllowed, tc.wantReason)
			}
			if removed := slices.Contains(d.Patch, removeToken); removed != tc.wantRemoved {
				t.Errorf("patch %+v removes the write token: %v, want %v", d.Patch, removed, tc.wantRemoved)
			}
		})
	}
}

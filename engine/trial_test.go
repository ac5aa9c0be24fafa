package engine_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/engine/enginetest"
	"github.com/fencegate/fencegate/fencestate"
)

// conflicting is an admission policy whose two complete rules give mode two
// values for a request by alice in the group auditors.
const conflicting = `package fencegate.admission

import rego.v1

default mode := "open"

mode := "closed" if input.request.userInfo.username == "alice"

mode := "audit" if "auditors" in input.request.userInfo.groups

decision := {"allowed": mode != "closed", "reasons": [], "warnings": [], "patch": []}
`

// fencedDeleteClash adds rules that conflict on a DELETE while the fence is
// fenced, and only then.
const fencedDeleteClash = `package fencegate.admission

import rego.v1

warnings contains "a fenced delete" if clash == 1

clash := 1 if input.request.operation == "DELETE"

clash := 2 if data.fence.status == "fenced"
`

// TestEvaluationErrorsNameTheAuthorsRules checks that a policy whose rules
// conflict on some requests fails on exactly those, as OPA evaluating the
// policy as written does, and reports the error as OPA does, naming the
// author's file and line, never the residual policy the engine evaluates
// in its place.
func TestEvaluationErrorsNameTheAuthorsRules(t *testing.T) {
	tests := map[string]struct {
		name, file string
	}{
		"complete rules that conflict on the request": {name: "admission.rego", file: conflicting},
		// Partial evaluation would inline the two definitions as two
		// alternatives and keep the one the condition on the value allows.
		"complete rules that conflict on the request and the fence": {name: "alice.rego", file: `package fencegate.admission

import rego.v1

warnings contains "alice while fenced" if clash == 1

clash := 1 if input.request.userInfo.username == "alice"

clash := 2 if data.fence.status == "fenced"
`},
	}
	body := enginetest.Review(t, engine.ReviewRequest{
		Operation: "CREATE", Object: enginetest.Component("billing", "default", nil),
		Username: "alice", Groups: []string{"auditors"},
	})
	for name, tc := range tests {
		p := newPair(t, map[string]string{tc.name: tc.file}, "")
		for _, state := range []fencestate.State{eastActive, westFenced} {
			t.Run(name+"/"+string(state.Status), func(t *testing.T) {
				p.writeFence(t, state)
				if err := p.compare(body); err != nil {
					t.Fatal(err)
				}
				_, want := p.reference.Admit(context.Background(), body)
				if want == nil {
					return
				}
				_, err := p.engine.Admit(context.Background(), body)
				// The reference names the file as it was given, the engine
				// by its path in the policy directory.
				got := strings.ReplaceAll(err.Error(), p.engine.PolicyStatus().Source+string(filepath.Separator), "")
				if !strings.Contains(got, want.Error()) {
					t.Errorf("engine error %q\ndoes not report the reference's %q", err, want)
				}
				if strings.Contains(err.Error(), "fencegate_residual") {
					t.Errorf("engine error %q names the residual policy, which the author never wrote", err)
				}
			})
		}
	}
}

// TestReloadTriesTheRevision checks that a revision that compiles but fails
// at evaluation never serves: it is refused as a revision that does not
// compile, with the error logged, counted and shown in the policy status.
func TestReloadTriesTheRevision(t *testing.T) {
	tests := map[string]struct {
		// file is a Rego file added to the shipped policies.
		name, file string
		want       []string
	}{
		"conflict in one fence status on a synthetic review": {
			name: "fenced.rego",
			file: fencedDeleteClash,
			want: []string{"a synthetic DELETE of a Component while the fence is fenced", "fenced.rego:", "eval_conflict_error"},
		},
		"undefined decision for status updates": {
			name: "admission.rego",
			file: `package fencegate.admission

import rego.v1

decision := {"allowed": true, "reasons": [], "warnings": [], "patch": []} if object.get(input.request, "subResource", "") != "status"
`,
			want: []string{"a synthetic status update of a Component", "data.fencegate.admission.decision is undefined"},
		},
		"conflict on a recent review": {
			name: "admission.rego",
			file: conflicting,
			want: []string{"a recent review", "admission.rego:"},
		},
		"reconcile error": {
			name: "reconcile.rego",
			file: `package fencegate.reconcile

import rego.v1

decision := {"hold": true, "reason": 7, "message": ""}
`,
			want: []string{"fail to reconcile a Component", "reason is a number 7"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := enginetest.CopyPolicies(t)
			reg := prometheus.NewPedanticRegistry()
			logs := &syncLog{}
			e := newEngine(t, engine.Options{PolicyDir: dir, Registerer: reg, Logger: funcr.New(logs.add, funcr.Options{})})
			writeFence(t, e, eastActive)
			// alice, in the group auditors, made a change the good policies
			// allowed.
			recent := enginetest.Review(t, engine.ReviewRequest{
				Operation: "UPDATE", Object: enginetest.Component("billing", "default", nil),
				OldObject: enginetest.Component("billing", "default", nil), Username: "alice", Groups: []string{"auditors"},
			})
			if res, err := e.Admit(context.Background(), recent); err != nil || !res.Decision.Allowed {
				t.Fatalf("the shipped policies decide %+v, %v", res.Decision, err)
			}
			good := e.Revision()

			writeFile(t, filepath.Join(dir, tc.name), tc.file)
			err := e.Reload(context.Background())
			if err == nil {
				t.Fatal("Reload put a revision in force that fails at evaluation")
			}
			status := e.PolicyStatus()
			if e.Revision() != good || status.Revision != good {
				t.Errorf("revision in force %s (status %s), want the last good %s", e.Revision(), status.Revision, good)
			}
			if status.LastReload == nil || status.LastReload.Result != "error" || status.LastReload.Revision == good {
				t.Fatalf("last reload = %+v, want the error and the refused revision", status.LastReload)
			}
			for _, want := range tc.want {
				if !strings.Contains(status.LastReload.Error, want) {
					t.Errorf("reload error %q does not contain %q", status.LastReload.Error, want)
				}
			}
			if got := enginetest.Reloads(t, reg, "error"); got != 1 {
				t.Errorf("failed reloads = %v, want 1", got)
			}
			if !logs.contains(`"msg"="policy reload failed"`) {
				t.Errorf("the refusal is not logged: %q", logs.lines)
			}
			if res, err := e.Admit(context.Background(), recent); err != nil || !res.Decision.Allowed {
				t.Errorf("after the refused reload: %+v, %v; want the last good policies' decision", res.Decision, err)
			}
		})
	}
}

// TestNewTriesThePolicies checks that engine.New refuses policies that
// compile but fail at evaluation, as it refuses policies that do not
// compile.
func TestNewTriesThePolicies(t *testing.T) {
	dir := enginetest.CopyPolicies(t)
	writeFile(t, filepath.Join(dir, "fenced.rego"), fencedDeleteClash)
	_, err := engine.New(engine.Options{PolicyDir: dir})
	if err == nil || !strings.Contains(err.Error(), "a synthetic DELETE of a Component while the fence is fenced") || !strings.Contains(err.Error(), "fenced.rego:") {
		t.Errorf("engine.New = %v, want the evaluation error on the synthetic DELETE naming fenced.rego", err)
	}
}

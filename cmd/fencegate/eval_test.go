package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/cli"
	"github.com/fencegate/fencegate/internal/cli/clitest"
)

const evalComponent = `apiVersion: components.fencegate.dev/v1alpha1
kind: Component
metadata:
  name: billing
  annotations:
    team: payments
spec:
  enabled: true
  chart: {repository: https://charts.example.com, name: billing, version: 1.4.2}
`

const (
	evalActive = `{"status": "active", "domain": "default", "cluster": {"name": "east", "uid": "e", "epoch": 7},
		"holder": {"name": "east", "uid": "e", "epoch": 7}, "token": 1042}`
	evalFenced = `status: fenced
domain: default
cluster: {name: west, uid: w, epoch: 3}
holder: {name: east, uid: e, epoch: 7}
token: 1042
`
	fencedDenial = `fencegate: cluster "west" (epoch 3) does not hold the ownership fence of domain "default": cluster "east" holds it at epoch 7.`
)

// evalFiles writes the files the eval tests read and returns their paths by
// name.
func evalFiles(t *testing.T) map[string]string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"component.yaml":  evalComponent,
		"old.yaml":        strings.Replace(evalComponent, "team: payments", "team: payments\n    fencegate.dev/epoch: \"7\"", 1),
		"component.json":  `{"apiVersion": "components.fencegate.dev/v1alpha1", "kind": "Component", "metadata": {"name": "ledger", "namespace": "finance"}}`,
		"active.json":     evalActive,
		"fenced.yaml":     evalFenced,
		"warn.yaml":       "enforcement: warn\n",
		"exempt.yaml":     "exempt_groups: [sre]\ncontroller_users: [system:serviceaccount:fencegate-system:fencegate]\n",
		"bad-config.yaml": "enforcement: block\n",
		"two.yaml":        evalComponent + "---\n" + evalComponent,
		"kindless.yaml":   "metadata: {name: x}\n",
		"list.yaml":       "- a\n- b\n",
		"broken.yaml":     "metadata: {name: [x\n",
		"typo.json":       `{"status": "active", "holdr": {"name": "east"}}`,
		"nostatus.json":   `{"domain": "default"}`,
		"policies/admission.rego": `package fencegate.admission

decision := {"allowed": false, "reasons": ["custom policy says no"], "warnings": [], "patch": []}
`,
		"policies/reconcile.rego": `package fencegate.reconcile

decision := {"hold": true, "reason": "FenceUnknown", "message": "custom"}
`,
		"broken-policies/admission.rego": "package fencegate.admission\n\ndecision := {\n",
		"cronjob.yaml":                   "apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: report, namespace: billing, resourceVersion: '41'}\nspec: {schedule: '0 3 * * *', suspend: false}\n",
		"held.yaml":                      "apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: report, namespace: billing, annotations: {fencegate.dev/held: '{\"fields\":[{\"path\":[\"spec\",\"suspend\"],\"value\":true,\"prior\":false}]}'}, managedFields: [{manager: fencegate-hold, operation: Update, fieldsV1: {f:spec: {f:suspend: {}}}}]}\nspec: {schedule: '0 3 * * *', suspend: true}\n",
		"configmap.yaml":                 "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\n",
	}
	paths := map[string]string{}
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		paths[name] = path
		paths[filepath.Dir(name)] = filepath.Dir(path)
	}
	return paths
}

// runEval runs `fencegate eval args...` and returns its output and exit
// code.
func runEval(t *testing.T, args ...string) (stdout string, code int, err error) {
	t.Helper()
	stdout, _, err = clitest.Execute(context.Background(), newRootCommand(), append([]string{"eval"}, args...)...)
	if err != nil {
		code = cli.ExitCode(err)
	}
	return stdout, code, err
}

// evalCase is a run of fencegate eval: its arguments, and the exit code,
// output and error it must give.
type evalCase struct {
	args     []string
	wantCode int
	wantOut  []string
	wantErr  string
}

func runEvalCases(t *testing.T, tests map[string]evalCase) {
	t.Helper()
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out, code, err := runEval(t, tc.args...)
			if code != tc.wantCode {
				t.Errorf("exit code %d (%v), want %d\n%s", code, err, tc.wantCode, out)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("error %v, want one containing %q", err, tc.wantErr)
			}
			for _, want := range tc.wantOut {
				if !strings.Contains(out, want) {
					t.Errorf("output does not contain %q:\n%s", want, out)
				}
			}
		})
	}
}

func TestEval(t *testing.T) {
	files := evalFiles(t)
	f := func(name string) string { return files[name] }
	tests := map[string]evalCase{
		"active create is allowed and stamped": {
			args:     []string{"-f", f("component.yaml"), "--fence", f("active.json")},
			wantCode: 0,
			wantOut: []string{"ALLOWED: CREATE default/billing\n", "patch (mutating webhook):",
				`{"op":"add","path":"/metadata/annotations/fencegate.dev~1epoch","value":"7"}`, "fence: active (this cluster east@7, holder east@7)"},
		},
		"fenced create is denied": {
			args:     []string{"-f", f("component.yaml"), "--fence", f("fenced.yaml"), "--user", "alice"},
			wantCode: 1,
			wantOut:  []string{"DENIED: CREATE default/billing by alice\n", "reasons:\n  - " + fencedDenial},
			wantErr:  "the request is denied",
		},
		"fenced update with the old object, enforcement warn": {
			args:     []string{"-f", f("component.yaml"), "--old-file", f("old.yaml"), "--operation", "update", "--fence", f("fenced.yaml"), "--config", f("warn.yaml")},
			wantCode: 0,
			wantOut: []string{"ALLOWED: UPDATE default/billing", `warnings:` + "\n" + `  - fencegate: admitted only because enforcement is "warn"`,
				`"path":"/metadata/annotations/fencegate.dev~1fenced","value":"true"`, "violations (decision log only):\n  - " + fencedDenial},
		},
		"fenced delete is allowed with a warning": {
			args:     []string{"-f", f("component.json"), "--operation", "DELETE", "--fence", f("fenced.yaml")},
			wantCode: 0,
			wantOut:  []string{"ALLOWED: DELETE finance/ledger", "fencegate: this delete removes the Component from cluster \"west\" only"},
		},
		"an exempt group": {
			args:     []string{"-f", f("component.yaml"), "--fence", f("fenced.yaml"), "--config", f("exempt.yaml"), "--group", "dev", "--group", "sre"},
			wantCode: 0,
			wantOut:  []string{"ALLOWED", `fencegate: admitted because group "sre" is exempt`},
		},
		"the controller's status update": {
			args: []string{"-f", f("component.yaml"), "--operation", "UPDATE", "--subresource", "status", "--fence", f("fenced.yaml"),
				"--config", f("exempt.yaml"), "--user", "system:serviceaccount:fencegate-system:fencegate"},
			wantCode: 0,
			wantOut:  []string{"ALLOWED: UPDATE default/billing (status) by system:serviceaccount:fencegate-system:fencegate"},
		},
		"a dry run gets the same decision": {
			args:     []string{"-f", f("component.yaml"), "--fence", f("fenced.yaml"), "--dry-run"},
			wantCode: 1,
			wantOut:  []string{"DENIED", fencedDenial},
		},
		"a policy directory": {
			args:     []string{"-f", f("component.yaml"), "--fence", f("active.json"), "--policy-dir", f("policies")},
			wantCode: 1,
			wantOut:  []string{"reasons:\n  - custom policy says no"},
		},
		"the namespace flag": {
			args:     []string{"-f", f("component.yaml"), "--fence", f("active.json"), "-n", "payments"},
			wantCode: 0,
			wantOut:  []string{"ALLOWED: CREATE payments/billing"},
		},
		"no -f":                {args: []string{"--fence", f("active.json")}, wantCode: 2, wantErr: "no Component: give it with -f FILE"},
		"no --fence":           {args: []string{"-f", f("component.yaml")}, wantCode: 2, wantErr: "no fence state: give it with --fence FILE"},
		"missing file":         {args: []string{"-f", "/nonexistent/c.yaml", "--fence", f("active.json")}, wantCode: 2, wantErr: "/nonexistent/c.yaml: no such file"},
		"missing fence file":   {args: []string{"-f", f("component.yaml"), "--fence", "/nonexistent/f.json"}, wantCode: 2, wantErr: "/nonexistent/f.json: no such file"},
		"broken YAML":          {args: []string{"-f", f("broken.yaml"), "--fence", f("active.json")}, wantCode: 2, wantErr: f("broken.yaml") + ": not valid YAML or JSON"},
		"two objects":          {args: []string{"-f", f("two.yaml"), "--fence", f("active.json")}, wantCode: 2, wantErr: f("two.yaml") + " holds 2 objects: give exactly one"},
		"not an object":        {args: []string{"-f", f("list.yaml"), "--fence", f("active.json")}, wantCode: 2, wantErr: f("list.yaml") + ": not a Kubernetes object"},
		"no kind":              {args: []string{"-f", f("kindless.yaml"), "--fence", f("active.json")}, wantCode: 2, wantErr: f("kindless.yaml") + ": the object needs an apiVersion (group/version) and a kind"},
		"misspelt fence field": {args: []string{"-f", f("component.yaml"), "--fence", f("typo.json")}, wantCode: 2, wantErr: f("typo.json") + `: not a fence state: error unmarshaling JSON: while decoding JSON: json: unknown field "holdr"`},
		"fence without status": {args: []string{"-f", f("component.yaml"), "--fence", f("nostatus.json")}, wantCode: 2, wantErr: f("nostatus.json") + `: status "": want one of active`},
		"bad config":           {args: []string{"-f", f("component.yaml"), "--fence", f("active.json"), "--config", f("bad-config.yaml")}, wantCode: 2, wantErr: f("bad-config.yaml") + `: enforcement: want one of deny, warn or dryrun, got "block"`},
		"broken policy":        {args: []string{"-f", f("component.yaml"), "--fence", f("active.json"), "--policy-dir", f("broken-policies")}, wantCode: 2, wantErr: "admission.rego:4: rego_parse_error"},
		"bad operation":        {args: []string{"-f", f("component.yaml"), "--fence", f("active.json"), "--operation", "PATCH"}, wantCode: 2, wantErr: `--operation "PATCH": want CREATE, UPDATE or DELETE`},
		"old file for create":  {args: []string{"-f", f("component.yaml"), "--fence", f("active.json"), "--old-file", f("old.yaml")}, wantCode: 2, wantErr: "--old-file is for UPDATE"},
		"bad output":           {args: []string{"-f", f("component.yaml"), "--fence", f("active.json"), "-o", "yaml"}, wantCode: 2, wantErr: `--output "yaml": want text or json`},
		"unknown flag":         {args: []string{"--nope"}, wantCode: 2, wantErr: "unknown flag: --nope"},
	}
	runEvalCases(t, tests)
}

func TestEvalHold(t *testing.T) {
	files := evalFiles(t)
	f := func(name string) string { return files[name] }
	tests := map[string]evalCase{
		"a fenced cluster holds a CronJob, with the patch it would send": {
			args:     []string{"--hold", "-f", f("cronjob.yaml"), "--fence", f("fenced.yaml")},
			wantCode: 1,
			wantOut: []string{"HELD: rule cronjob\n", "field spec.suspend held at true", "quiet: no: CronJob billing/report: spec.suspend is not true",
				`the hold controller would hold it: [{"op":"test","path":"/metadata/resourceVersion","value":"41"},{"op":"add","path":"/spec/suspend","value":true},{"op":"add","path":"/metadata/annotations","value":{}},{"op":"add","path":"/metadata/annotations/fencegate.dev~1held"`},
			wantErr: "the object is held",
		},
		"the holder releases what fencegate held": {
			args:     []string{"--hold", "-f", f("held.yaml"), "--fence", f("active.json")},
			wantCode: 0,
			wantOut:  []string{"ACTS: rule cronjob", `the hold controller would release it: [{"op":"add","path":"/spec/suspend","value":false},{"op":"remove","path":"/metadata/annotations/fencegate.dev~1held"}]`},
		},
		"an object of no held kind": {
			args:     []string{"--hold", "-f", f("configmap.yaml"), "--fence", f("fenced.yaml")},
			wantCode: 0,
			wantOut:  []string{"NOT HELD: of no held kind"},
		},
		"as JSON": {
			args:     []string{"--hold", "-f", f("cronjob.yaml"), "--fence", f("fenced.yaml"), "-o", "json"},
			wantCode: 1,
			wantOut:  []string{`"kind": "cronjob"`, `"hold": true`, `"action": "hold"`},
			wantErr:  "the object is held",
		},
		"admission's flags are refused": {
			args:     []string{"--hold", "-f", f("cronjob.yaml"), "--fence", f("fenced.yaml"), "--operation", "UPDATE"},
			wantCode: 2,
			wantErr:  "--operation, --old-file and --subresource are for admission",
		},
	}
	runEvalCases(t, tests)
}

func TestEvalJSON(t *testing.T) {
	files := evalFiles(t)
	out, code, _ := runEval(t, "-f", files["component.yaml"], "--fence", files["fenced.yaml"], "--config", files["warn.yaml"], "-o", "json")
	if code != 0 {
		t.Fatalf("exit code %d:\n%s", code, out)
	}
	var got struct {
		Allowed    bool             `json:"allowed"`
		Reasons    []string         `json:"reasons"`
		Warnings   []string         `json:"warnings"`
		Violations []string         `json:"violations"`
		Patch      []map[string]any `json:"patch"`
		Fence      struct {
			Status string `json:"status"`
		} `json:"fence"`
		Revision string `json:"revision"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("-o json printed something else: %v\n%s", err, out)
	}
	if !got.Allowed || got.Reasons == nil || len(got.Reasons) != 0 || len(got.Warnings) != 1 || len(got.Violations) != 1 ||
		got.Fence.Status != "fenced" || len(got.Revision) != 16 {
		t.Errorf("decision = %+v", got)
	}
	wantPatch := []map[string]any{
		{"op": "add", "path": "/metadata/annotations/fencegate.dev~1fenced", "value": "true"},
		{"op": "add", "path": "/metadata/annotations/fencegate.dev~1fenced-by", "value": "east@7"},
	}
	if !reflect.DeepEqual(got.Patch, wantPatch) {
		t.Errorf("patch = %v, want %v", got.Patch, wantPatch)
	}
}

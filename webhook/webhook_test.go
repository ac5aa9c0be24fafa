package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/fencegate/fencegate/domain"
	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/engine/enginetest"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/webhook"
)

// fixture is an engine and a webhook handler over it.
type fixture struct {
	engine  *engine.Engine
	handler http.Handler
	reg     *prometheus.Registry
	logs    *logLines
}

type fixtureOptions struct {
	config    string // JSON of data.fencegate.config
	policyDir string
	fence     *fencestate.State
}

func newFixture(t testing.TB, o fixtureOptions) *fixture {
	t.Helper()
	opts := engine.Options{PolicyDir: o.policyDir}
	if o.config != "" {
		opts.ConfigFile = filepath.Join(t.TempDir(), "config.json")
		if err := os.WriteFile(opts.ConfigFile, []byte(o.config), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	e, err := engine.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if o.fence != nil {
		if err := e.WriteFence(context.Background(), *o.fence); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewPedanticRegistry()
	logs := &logLines{}
	s, err := webhook.New(webhook.Options{
		Addr: "127.0.0.1:0", CertDir: t.TempDir(), Engine: e, Registerer: reg,
		Logger: funcr.NewJSON(logs.add, funcr.Options{}),
	})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{engine: e, handler: s.Handler(), reg: reg, logs: logs}
}

// post sends body to path and returns the HTTP response.
func (f *fixture) post(path string, body []byte, contentType string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	rec := httptest.NewRecorder()
	f.handler.ServeHTTP(rec, req)
	return rec
}

// review posts an AdmissionReview and decodes the answer.
func (f *fixture) review(t *testing.T, path string, body []byte) *admissionv1.AdmissionResponse {
	t.Helper()
	rec := f.post(path, body, "application/json")
	if rec.Code != http.StatusOK {
		t.Fatalf("POST %s: HTTP %d: %s", path, rec.Code, rec.Body)
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("decode response: %v: %s", err, rec.Body)
	}
	if out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" || out.Response == nil {
		t.Fatalf("response is not an admission.k8s.io/v1 AdmissionReview: %s", rec.Body)
	}
	return out.Response
}

// logLines collects JSON log lines.
type logLines struct {
	mu    sync.Mutex
	lines []map[string]any
}

func (l *logLines) add(obj string) {
	var m map[string]any
	if err := json.Unmarshal([]byte(obj), &m); err != nil {
		panic(fmt.Sprintf("log line is not JSON: %s", obj))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, m)
}

func (l *logLines) withMessage(msg string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range l.lines {
		if line["msg"] == msg {
			out = append(out, line)
		}
	}
	return out
}

var (
	eastActive = enginetest.Fence(fencestate.Active, "east", 7, "east", 7)
	statuses   = map[fencestate.Status]fencestate.State{
		fencestate.Active:         eastActive,
		fencestate.Fenced:         enginetest.Fence(fencestate.Fenced, "west", 3, "east", 7),
		fencestate.EpochRegressed: enginetest.Fence(fencestate.EpochRegressed, "west", 3, "east", 7),
		fencestate.Acquiring:      enginetest.Fence(fencestate.Acquiring, "west", 8, "east", 7),
		fencestate.Unknown:        enginetest.Fence(fencestate.Unknown, "west", 3, "east", 7),
		fencestate.Unsupported:    enginetest.Fence(fencestate.Unsupported, "west", 3, "", 0),
	}
	// What each status's denial says.
	statusMessages = map[fencestate.Status]string{
		fencestate.Fenced:         `fencegate: cluster "west" (epoch 3) does not hold the ownership fence of domain "default": cluster "east" holds it at epoch 7.`,
		fencestate.EpochRegressed: `fencegate: cluster "west" declares epoch 3, lower than an epoch it declared before`,
		fencestate.Acquiring:      `fencegate: cluster "west" (epoch 8) is taking over the ownership fence of domain "default"`,
		fencestate.Unknown:        `fencegate: cluster "west" (epoch 3) cannot confirm that it holds the ownership fence of domain "default"`,
		fencestate.Unsupported:    `fencegate: the fence authority of cluster "west" does not implement the fence protocol`,
	}
)

// TestDecisions walks every operation × fence status × exemption ×
// enforcement mode through both endpoints.
func TestDecisions(t *testing.T) {
	for _, enforcement := range []string{"deny", "warn", "dryrun"} {
		config := fmt.Sprintf(`{"enforcement": %q, "exempt_groups": ["break-glass"]}`, enforcement)
		for status, state := range statuses {
			f := newFixture(t, fixtureOptions{config: config, fence: &state})
			for _, op := range []string{"CREATE", "UPDATE", "DELETE"} {
				for _, exempt := range []bool{false, true} {
					name := fmt.Sprintf("%s/%s/%s/exempt=%v", enforcement, status, op, exempt)
					t.Run(name, func(t *testing.T) {
						checkDecision(t, f, enforcement, status, op, exempt)
					})
				}
			}
		}
	}
}

func checkDecision(t *testing.T, f *fixture, enforcement string, status fencestate.Status, op string, exempt bool) {
	groups := []string{"developers"}
	if exempt {
		groups = append(groups, "break-glass")
	}
	r := engine.ReviewRequest{UID: "uid-" + op, Operation: op, Username: "alice", Groups: groups}
	obj := enginetest.Component("billing", "default", map[string]string{"team": "payments"})
	switch op {
	case "CREATE":
		r.Object = obj
	case "UPDATE":
		r.Object, r.OldObject = obj, obj
	case "DELETE":
		r.OldObject = obj
	}
	body := enginetest.Review(t, r)

	holds := status == fencestate.Active
	changes := op != "DELETE"
	wantAllowed := !changes || holds || exempt || enforcement != "deny"
	var wantWarning string
	switch {
	case !changes && !holds:
		wantWarning = "fencegate: this delete removes the Component from cluster"
	case changes && !holds && exempt:
		wantWarning = `fencegate: admitted because group "break-glass" is exempt: ` + strings.TrimPrefix(statusMessages[status], "fencegate: ")
	case changes && !holds && enforcement == "warn":
		wantWarning = `fencegate: admitted only because enforcement is "warn": ` + strings.TrimPrefix(statusMessages[status], "fencegate: ")
	}
	var wantPatch string
	switch {
	case changes && holds:
		wantPatch = `[{"op":"add","path":"/metadata/annotations/fencegate.dev~1epoch","value":"7"},{"op":"add","path":"/metadata/annotations/fencegate.dev~1token","value":"1042"}]`
	case changes && wantAllowed:
		holder := "east@7"
		if status == fencestate.Unsupported {
			holder = "unknown"
		}
		wantPatch = `[{"op":"add","path":"/metadata/annotations/fencegate.dev~1fenced","value":"true"},{"op":"add","path":"/metadata/annotations/fencegate.dev~1fenced-by","value":"` + holder + `"}]`
	}

	v := f.review(t, webhook.PathValidate, body)
	if v.Patch != nil || v.PatchType != nil {
		t.Errorf("validate returned a patch: %s", v.Patch)
	}
	m := f.review(t, webhook.PathMutate, body)
	// Both endpoints deny what the policy denies: a change is admitted
	// only when both replicas its two calls reach let it through.
	for endpoint, resp := range map[string]*admissionv1.AdmissionResponse{"validate": v, "mutate": m} {
		if string(resp.UID) != r.UID {
			t.Errorf("%s uid = %q, want %q", endpoint, resp.UID, r.UID)
		}
		if resp.Allowed != wantAllowed {
			t.Errorf("%s allowed = %v, want %v (%+v)", endpoint, resp.Allowed, wantAllowed, resp.Result)
		}
		if wantAllowed {
			if resp.Result != nil {
				t.Errorf("%s: an allowed request has a status: %+v", endpoint, resp.Result)
			}
		} else if resp.Result == nil || resp.Result.Code != http.StatusForbidden || resp.Result.Reason != "Forbidden" || !strings.HasPrefix(resp.Result.Message, statusMessages[status]) {
			t.Errorf("%s denial status = %+v, want 403 Forbidden starting %q", endpoint, resp.Result, statusMessages[status])
		}
	}
	switch {
	case wantPatch == "" && (m.Patch != nil || m.PatchType != nil):
		t.Errorf("mutate patch = %s, want none", m.Patch)
	case wantPatch != "" && (string(m.Patch) != wantPatch || m.PatchType == nil || *m.PatchType != admissionv1.PatchTypeJSONPatch):
		t.Errorf("mutate patch = %s (%v), want %s", m.Patch, m.PatchType, wantPatch)
	}

	for endpoint, resp := range map[string]*admissionv1.AdmissionResponse{"validate": v, "mutate": m} {
		got := strings.Join(resp.Warnings, "\n")
		if (wantWarning == "" && got != "") || !strings.HasPrefix(got, wantWarning) {
			t.Errorf("%s warnings = %q, want %q", endpoint, got, wantWarning)
		}
	}
}

// TestWriteTokens: on the holder, a write that asserts the fence's token is
// stamped and loses the assertion; one that asserts an older token is
// refused on both endpoints with reason STALE_FENCING_TOKEN and a message
// naming both tokens; an assertion that is no token is refused as such;
// a write without one is stamped whatever fencegate.dev/token it sends.
// Only what the request changes asserts: a token stored before and sent
// back unchanged is no assertion, and is removed.
func TestWriteTokens(t *testing.T) {
	f := newFixture(t, fixtureOptions{fence: &eastActive})
	stamp := `{"op":"add","path":"/metadata/annotations/fencegate.dev~1epoch","value":"7"},{"op":"add","path":"/metadata/annotations/fencegate.dev~1token","value":"1042"}`
	removeAssertion := `{"op":"remove","path":"/metadata/annotations/fencegate.dev~1write-token"}`
	tests := map[string]struct {
		annotations map[string]string
		// stored: the old object carries the same annotations.
		stored      bool
		wantReason  string // "" when allowed
		wantMessage []string
		wantPatch   string
	}{
		"current token": {
			annotations: map[string]string{"fencegate.dev/write-token": "1042"},
			wantPatch:   "[" + stamp + "," + removeAssertion + "]",
		},
		"newer token": {
			// A token the fence has not reached cannot come from an
			// earlier hold; the authority's ordering is not this check's.
			annotations: map[string]string{"fencegate.dev/write-token": "1043"},
			wantPatch:   "[" + stamp + "," + removeAssertion + "]",
		},
		"stale token": {
			annotations: map[string]string{"fencegate.dev/write-token": "1041"},
			wantReason:  "STALE_FENCING_TOKEN",
			wantMessage: []string{"STALE_FENCING_TOKEN", "fencing token 1041", "now at token 1042"},
		},
		"not a token": {
			annotations: map[string]string{"fencegate.dev/write-token": "1042 "},
			wantReason:  "Forbidden",
			wantMessage: []string{`annotation fencegate.dev/write-token is "1042 "`},
		},
		"stale token stored before, sent back": {
			annotations: map[string]string{"fencegate.dev/write-token": "1041"},
			stored:      true,
			wantPatch:   "[" + stamp + "," + removeAssertion + "]",
		},
		"no assertion, old stored token": {
			annotations: map[string]string{"fencegate.dev/token": "9"},
			wantPatch:   "[" + stamp + "]",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			obj := enginetest.Component("billing", "default", tc.annotations)
			old := enginetest.Component("billing", "default", nil)
			if tc.stored {
				old = obj
			}
			body := enginetest.Review(t, engine.ReviewRequest{UID: "u", Operation: "UPDATE", Username: "alice", Object: obj, OldObject: old})
			for _, path := range []string{webhook.PathValidate, webhook.PathMutate} {
				resp := f.review(t, path, body)
				if resp.Allowed != (tc.wantReason == "") {
					t.Fatalf("%s allowed = %v, want %v (%+v)", path, resp.Allowed, tc.wantReason == "", resp.Result)
				}
				if tc.wantReason != "" {
					if resp.Result == nil || resp.Result.Code != http.StatusForbidden || string(resp.Result.Reason) != tc.wantReason {
						t.Fatalf("%s status = %+v, want 403 %s", path, resp.Result, tc.wantReason)
					}
					for _, want := range tc.wantMessage {
						if !strings.Contains(resp.Result.Message, want) {
							t.Errorf("%s message %q does not say %q", path, resp.Result.Message, want)
						}
					}
				}
				if path == webhook.PathMutate && string(resp.Patch) != tc.wantPatch {
					t.Errorf("mutate patch = %s, want %s", resp.Patch, tc.wantPatch)
				}
			}
		})
	}
}

func TestBadRequests(t *testing.T) {
	f := newFixture(t, fixtureOptions{fence: &eastActive})
	valid := enginetest.Review(t, engine.ReviewRequest{Operation: "CREATE", Object: enginetest.Component("billing", "default", nil)})
	huge := append([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","x":"`),
		bytes.Repeat([]byte("a"), webhook.MaxBodyBytes)...)
	huge = append(huge, `"}}`...)
	tests := map[string]struct {
		method, contentType string
		body                []byte
		wantCode            int
		want                string
	}{
		"oversized":         {body: huge, wantCode: http.StatusRequestEntityTooLarge, want: "larger than 3145728 bytes (3 MiB)"},
		"malformed JSON":    {body: []byte(`{"apiVersion":`), wantCode: http.StatusBadRequest, want: "the request body is not valid JSON"},
		"empty":             {body: nil, wantCode: http.StatusBadRequest, want: "the request body is empty"},
		"v1beta1":           {body: bytes.Replace(valid, []byte(`admission.k8s.io/v1"`), []byte(`admission.k8s.io/v1beta1"`), 1), wantCode: http.StatusBadRequest, want: `apiVersion "admission.k8s.io/v1beta1" is not supported`},
		"other kind":        {body: bytes.Replace(valid, []byte(`"kind":"AdmissionReview"`), []byte(`"kind":"TokenReview"`), 1), wantCode: http.StatusBadRequest, want: `kind "TokenReview" is not supported`},
		"no request":        {body: []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`), wantCode: http.StatusBadRequest, want: "the AdmissionReview has no request"},
		"no uid":            {body: bytes.Replace(valid, []byte(`"uid":"offline",`), nil, 1), wantCode: http.StatusBadRequest, want: "the request has no uid"},
		"GET":               {method: http.MethodGet, wantCode: http.StatusMethodNotAllowed, want: "send AdmissionReviews with POST"},
		"not JSON content":  {contentType: "application/yaml", body: valid, wantCode: http.StatusUnsupportedMediaType, want: `Content-Type "application/yaml": send application/json`},
		"JSON with charset": {contentType: "application/json; charset=utf-8", body: valid, wantCode: http.StatusOK, want: `"allowed":true`},
	}
	for name, tc := range tests {
		for _, path := range []string{webhook.PathValidate, webhook.PathMutate} {
			t.Run(name+path, func(t *testing.T) {
				method := tc.method
				if method == "" {
					method = http.MethodPost
				}
				req := httptest.NewRequest(method, path, bytes.NewReader(tc.body))
				if tc.contentType != "" {
					req.Header.Set("Content-Type", tc.contentType)
				}
				rec := httptest.NewRecorder()
				f.handler.ServeHTTP(rec, req)
				if rec.Code != tc.wantCode || !strings.Contains(rec.Body.String(), tc.want) {
					t.Errorf("HTTP %d %q; want %d containing %q", rec.Code, rec.Body, tc.wantCode, tc.want)
				}
			})
		}
	}
	if got := decisions(t, f.reg, "validate", "unknown", "invalid"); got != float64(len(tests)-1) {
		t.Errorf("invalid validate requests counted = %v, want %d", got, len(tests)-1)
	}
}

// decisions returns the value of fencegate_admission_decisions_total for
// the labels.
func decisions(t *testing.T, g prometheus.Gatherer, endpoint, operation, result string) float64 {
	t.Helper()
	return enginetest.Counter(t, g, "fencegate_admission_decisions_total",
		map[string]string{"endpoint": endpoint, "operation": operation, "result": result})
}

// TestDecisionsByDomain: the decisions counter names the object's domain,
// and a domain this fencegate does not serve as unserved, so that the
// labels an object carries cannot grow the counter's series.
func TestDecisionsByDomain(t *testing.T) {
	f := newFixture(t, fixtureOptions{fence: &eastActive})
	for i, d := range []string{"", "payments", "search"} {
		object := map[string]any{
			"apiVersion": "components.fencegate.dev/v1alpha1", "kind": "Component",
			"metadata": map[string]any{"name": fmt.Sprintf("c%d", i), "namespace": "default", "labels": map[string]any{domain.Label: d}},
			"spec":     map[string]any{},
		}
		raw, err := json.Marshal(object)
		if err != nil {
			t.Fatal(err)
		}
		resp := f.review(t, webhook.PathValidate, enginetest.Review(t, engine.ReviewRequest{UID: "u", Operation: "CREATE", Object: raw}))
		if want := d == ""; resp.Allowed != want {
			t.Errorf("domain %q: allowed = %v, want %v (%+v)", d, resp.Allowed, want, resp.Result)
		}
	}
	for _, tc := range []struct{ domain, result string }{{"default", "allowed"}, {"unserved", "denied"}} {
		got := enginetest.Counter(t, f.reg, "fencegate_admission_decisions_total", map[string]string{"endpoint": "validate", "result": tc.result, "domain": tc.domain})
		if want := map[string]float64{"default": 1, "unserved": 2}[tc.domain]; got != want {
			t.Errorf("decisions of domain %s = %v, want %v", tc.domain, got, want)
		}
	}
}

func TestNotReadyAndErrors(t *testing.T) {
	body := enginetest.Review(t, engine.ReviewRequest{UID: "u1", Operation: "CREATE", Object: enginetest.Component("billing", "default", nil)})

	t.Run("no fence state yet", func(t *testing.T) {
		f := newFixture(t, fixtureOptions{})
		for _, path := range []string{webhook.PathValidate, webhook.PathMutate} {
			resp := f.review(t, path, body)
			if resp.Allowed || string(resp.UID) != "u1" || resp.Result == nil || resp.Result.Code != http.StatusServiceUnavailable ||
				!strings.Contains(resp.Result.Message, "fencegate is not ready to decide: domain default: no fence state has been written yet") {
				t.Errorf("%s: %+v %+v", path, resp, resp.Result)
			}
		}
	})

	t.Run("a policy whose decision is malformed for one user", func(t *testing.T) {
		// Malformed for every request, the policy would not pass the
		// engine's trial and would never serve.
		dir := t.TempDir()
		for name, src := range map[string]string{
			"admission.rego": "package fencegate.admission\n\nimport rego.v1\n\n" +
				"default decision := {\"allowed\": true, \"reasons\": [], \"warnings\": [], \"patch\": []}\n\n" +
				"decision := {\"allowed\": \"yes\"} if input.request.userInfo.username == \"mallory\"\n",
			"reconcile.rego": "package fencegate.reconcile\n\ndecision := {\"hold\": true, \"reason\": \"FenceUnknown\", \"message\": \"\"}\n",
		} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		f := newFixture(t, fixtureOptions{policyDir: dir, fence: &eastActive})
		resp := f.review(t, webhook.PathValidate, enginetest.Review(t, engine.ReviewRequest{
			UID: "u2", Operation: "CREATE", Object: enginetest.Component("billing", "default", nil), Username: "mallory",
		}))
		if resp.Allowed || resp.Result == nil || resp.Result.Code != http.StatusInternalServerError ||
			!strings.Contains(resp.Result.Message, `data.fencegate.admission.decision: allowed is a string "yes": want a boolean`) {
			t.Errorf("response = %+v %+v", resp, resp.Result)
		}
		if got := decisions(t, f.reg, "validate", "CREATE", "error"); got != 1 {
			t.Errorf("errors counted = %v", got)
		}
		lines := f.logs.withMessage("admission decision")
		if len(lines) != 1 || lines[0]["error"] == nil {
			t.Errorf("decision log = %v, want one line with the error", lines)
		}
	})
}

func TestDecisionLog(t *testing.T) {
	fenced := statuses[fencestate.Fenced]
	f := newFixture(t, fixtureOptions{config: `{"enforcement": "dryrun"}`, fence: &fenced})
	body := enginetest.Review(t, engine.ReviewRequest{
		UID: "log-1", Operation: "UPDATE", DryRun: true, Username: "alice", Groups: []string{"developers"},
		Object: enginetest.Component("billing", "payments", nil), OldObject: enginetest.Component("billing", "payments", nil),
	})
	f.review(t, webhook.PathValidate, body)
	lines := f.logs.withMessage("admission decision")
	if len(lines) != 1 {
		t.Fatalf("decision log lines = %d, want 1: %v", len(lines), f.logs.lines)
	}
	line := lines[0]
	want := map[string]any{
		"endpoint": "validate", "uid": "log-1", "user": "alice", "operation": "UPDATE", "namespace": "payments", "name": "billing",
		"dryRun": true, "allowed": true, "fenceStatus": "fenced", "epoch": 3.0, "holder": "east@7", "revision": f.engine.Revision(),
	}
	for k, v := range want {
		if line[k] != v {
			t.Errorf("log %s = %v, want %v", k, line[k], v)
		}
	}
	if violations, _ := line["violations"].([]any); len(violations) != 1 || !strings.HasPrefix(fmt.Sprint(violations[0]), statusMessages[fencestate.Fenced]) {
		t.Errorf("log violations = %v, want the would-be denial", line["violations"])
	}
	if _, ok := line["duration"]; !ok {
		t.Error("log has no duration")
	}
	if got := decisions(t, f.reg, "validate", "UPDATE", "allowed"); got != 1 {
		t.Errorf("allowed UPDATEs counted = %v, want 1", got)
	}
	if n := testutil.CollectAndCount(f.reg, "fencegate_admission_duration_seconds"); n != 1 {
		t.Errorf("duration series = %d, want 1", n)
	}
}

func TestPolicyStatusEndpoint(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	get := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		f.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec
	}
	rec := get(webhook.PathPolicyStatus)
	var status engine.PolicyStatus
	if err := json.Unmarshal(rec.Body.Bytes(), &status); err != nil || rec.Code != http.StatusOK || status.Revision != f.engine.Revision() || status.Source != "embedded" {
		t.Errorf("policy status = %d %q (%v)", rec.Code, rec.Body, err)
	}
	// Health, readiness and metrics are the process's (the manager's), not
	// the webhook's.
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if rec := get(path); rec.Code != http.StatusNotFound {
			t.Errorf("GET %s = %d, want 404: the webhook serves no operational endpoint of its own", path, rec.Code)
		}
	}
}

func TestNewErrors(t *testing.T) {
	e, err := engine.New(engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		opts webhook.Options
		want string
	}{
		"no engine":   {opts: webhook.Options{Addr: ":9443", CertDir: "/certs"}, want: "no engine"},
		"no address":  {opts: webhook.Options{Engine: e, CertDir: "/certs"}, want: "no address"},
		"no cert dir": {opts: webhook.Options{Engine: e, Addr: ":9443"}, want: "no certificate directory"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := webhook.New(tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// FuzzHandler posts arbitrary bodies: the handler never panics, and answers
// either an AdmissionReview echoing the uid or an HTTP error.
func FuzzHandler(f *testing.F) {
	f.Add(enginetest.LargeUpdate(f))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","operation":"DELETE"}}`))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","object":{"metadata":{"annotations":{"fencegate.dev/epoch":[]}}}}}`))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1beta1"}`))
	f.Add([]byte(`\u0000`))
	fx := newFixture(f, fixtureOptions{fence: &eastActive})
	fx.handler = withDiscardedLogs(f, fx)
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, path := range []string{webhook.PathValidate, webhook.PathMutate} {
			rec := fx.post(path, body, "application/json")
			switch rec.Code {
			case http.StatusOK:
				var out admissionv1.AdmissionReview
				if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil || out.Response.UID == "" {
					t.Fatalf("%s: 200 without an AdmissionReview response: %s", path, rec.Body)
				}
				var patch []map[string]any
				if out.Response.Patch != nil && json.Unmarshal(out.Response.Patch, &patch) != nil {
					t.Fatalf("%s: the patch is not a JSONPatch: %s", path, out.Response.Patch)
				}
			case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			default:
				t.Fatalf("%s: HTTP %d: %s", path, rec.Code, rec.Body)
			}
		}
	})
}

// withDiscardedLogs serves the fixture's engine with a handler that does
// not log, so that a long fuzz run does not keep every line.
func withDiscardedLogs(t testing.TB, f *fixture) http.Handler {
	t.Helper()
	s, err := webhook.New(webhook.Options{Addr: "127.0.0.1:0", CertDir: t.TempDir(), Engine: f.engine, Logger: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	return s.Handler()
}

package sidebyside

import (
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestAttackChecksEveryAnswer runs the load generator against servers that
// answer right, wrong or not at all: only right answers count as successes.
func TestAttackChecksEveryAnswer(t *testing.T) {
	reviews := testReviews(t)
	want := testExpected(t, stateActive, reviews)[validate]
	answer := func(allowed bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			var review admissionv1.AdmissionReview
			if err := json.NewDecoder(r.Body).Decode(&review); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			_ = json.NewEncoder(w).Encode(admissionv1.AdmissionReview{
				TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
				Response: &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: allowed},
			})
		}
	}
	tests := map[string]struct {
		handler         http.Handler
		wantOK          bool
		wantFailed      bool
		wantWrong       bool
		keepAlive       bool
		wantProblemText string
	}{
		"right answers":       {handler: answer(true), wantOK: true, keepAlive: true},
		"right, no keepalive": {handler: answer(true), wantOK: true},
		"wrong answers":       {handler: answer(false), wantWrong: true, keepAlive: true, wantProblemText: "allowed=false, want true"},
		"server errors": {handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
		}), wantFailed: true, keepAlive: true, wantProblemText: "HTTP 503"},
		"connections dropped": {handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = conn.Close()
			}
			// How a dropped connection reads (EOF, reset, closed) depends on
			// timing; that the problem names the request is what counts.
		}), wantFailed: true, keepAlive: true, wantProblemText: `Post "https://`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewUnstartedServer(tc.handler)
			srv.Config.ErrorLog = log.New(io.Discard, "", 0) // dropped connections are the point
			srv.StartTLS()
			defer srv.Close()
			tr := srv.Client().Transport.(*http.Transport)
			tgt := target{URL: srv.URL + "/validate", TLS: tr.TLSClientConfig, Pid: os.Getpid()}
			client := newClient(tgt, tc.keepAlive, 0)
			defer client.CloseIdleConnections()
			res, err := attack(client, tgt, reviews, newChecker(validate, want), loadSpec{Rate: 100, Workers: 2, Duration: 300 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			// 30 are due; a busy machine may send fewer, a broken generator
			// sends one or none.
			if res.Requests < 3 {
				t.Fatalf("%d requests in 300ms at 100/s", res.Requests)
			}
			if got := res.Requests - res.Failed - res.Wrong; (got == res.Requests) != tc.wantOK {
				t.Errorf("%d of %d answers right (wantOK %t): %s", got, res.Requests, tc.wantOK, res.FirstProblem)
			}
			if (res.Failed == res.Requests) != tc.wantFailed || (res.Wrong == res.Requests) != tc.wantWrong {
				t.Errorf("failed %d, wrong %d of %d; want all failed %t, all wrong %t", res.Failed, res.Wrong, res.Requests, tc.wantFailed, tc.wantWrong)
			}
			if tc.wantProblemText != "" && !strings.Contains(res.FirstProblem, tc.wantProblemText) {
				t.Errorf("first problem %q does not say %q", res.FirstProblem, tc.wantProblemText)
			}
			if len(res.Latencies) != res.Requests || res.Elapsed <= 0 {
				t.Errorf("%d latencies for %d requests over %s", len(res.Latencies), res.Requests, res.Elapsed)
			}
			if tc.wantOK && res.Throughput() <= 0 {
				t.Errorf("throughput %f", res.Throughput())
			}
		})
	}
}

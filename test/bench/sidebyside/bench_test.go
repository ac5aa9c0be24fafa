package sidebyside

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/fencegate/fencegate/webhook"
)

// BenchmarkWebhookTLS measures fencegate's webhook in this process the way
// the bench measures `fencegate run`: over TLS on loopback, eight kept-alive
// HTTP/1.1 connections, the bench's reviews in turn, every answer checked.
// It is what to profile when the bench's figures need explaining
// (-cpuprofile); the client shares the process, and the server's side is
// what runs under net/http.(*conn).serve.
func BenchmarkWebhookTLS(b *testing.B) {
	reviews, err := buildReviews(64)
	if err != nil {
		b.Fatal(err)
	}
	paths := map[endpoint]string{validate: webhook.PathValidate, mutate: webhook.PathMutate}
	for _, sc := range scenarios {
		b.Run(string(sc.Endpoint)+"/"+sc.State, func(b *testing.B) {
			want := testExpected(b, sc.State, reviews)[sc.Endpoint]
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			_, tlsCfg := newWebhook(b, testStates[sc.State].fence, ln)
			url := "https://" + ln.Addr().String() + paths[sc.Endpoint]
			const connections = 8
			client := newClient(target{TLS: tlsCfg}, true, connections)
			defer client.CloseIdleConnections()
			// One client goroutine per connection (RunParallel starts
			// parallelism × GOMAXPROCS of them).
			b.SetParallelism(max(connections/runtime.GOMAXPROCS(0), 1))
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				chk := newChecker(sc.Endpoint, want)
				i := 0
				for pb.Next() {
					i++
					resp, err := client.Post(url, "application/json", bytes.NewReader(reviews[i%len(reviews)].Body))
					if err != nil {
						b.Error(err)
						return
					}
					body, err := io.ReadAll(resp.Body)
					_ = resp.Body.Close()
					if err != nil {
						b.Error(err)
						return
					}
					if err := chk.check(resp.StatusCode, body); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkReadingReviews measures, in this process and without TLS, what
// answering one of the bench's reviews costs fencegate's webhook
// (validate, active: the decision, its metrics, and its log line, every
// one built in the console format and written to nowhere) beside what
// reading it the usual Go ways costs with no decision at all:
//
//   - allow-all-webhook: the allow-all webhook's handler (controller-runtime's
//     admission webhook allowing every request: decode, handle, encode);
//   - json-decode: encoding/json.Unmarshal into an AdmissionReview
//     (k8s.io/api), the objects kept as raw JSON;
//   - json-valid: encoding/json.Valid, which only checks that the body is
//     JSON.
//
// fencegate's decisions are remembered ones after the first of each kind,
// as under the side-by-side run's load: the reviews differ in what the
// policies ignore. Every answer is checked once before the timing, as the
// side-by-side run checks them. The floor's handler, which decodes
// nothing, is what every one of them is measured above there.
func BenchmarkReadingReviews(b *testing.B) {
	reviews, err := buildReviews(64)
	if err != nil {
		b.Fatal(err)
	}
	log.SetLogger(logr.Discard()) // the allow-all webhook's, as ServeFloor sets it
	fg, _ := newWebhook(b, testStates[stateActive].fence, nil)
	// serve answers a review through h and checks the answer with chk.
	serve := func(h http.Handler, path string, chk answerCheck) func([]byte) error {
		return func(body []byte) error {
			req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if chk != nil {
				return chk.check(w.Code, w.Body.Bytes())
			}
			return nil
		}
	}
	for _, tc := range []struct {
		name string
		// read answers or reads one review; checked answers it and checks
		// the answer (nil for the mere readers).
		read, checked func([]byte) error
	}{
		{name: "fencegate",
			read:    serve(fg.Handler(), webhook.PathValidate, nil),
			checked: serve(fg.Handler(), webhook.PathValidate, newChecker(validate, testExpected(b, stateActive, reviews)[validate]))},
		{name: "allow-all-webhook",
			read:    serve(allowAllHandler(), "/", nil),
			checked: serve(allowAllHandler(), "/", newChecker(validate, allowEvery(reviews)))},
		{name: "json-decode", read: func(body []byte) error {
			var review admissionv1.AdmissionReview
			return json.Unmarshal(body, &review)
		}},
		{name: "json-valid", read: func(body []byte) error {
			if !json.Valid(body) {
				return errors.New("the review is not JSON")
			}
			return nil
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			check := tc.checked
			if check == nil {
				check = tc.read
			}
			for _, r := range reviews {
				if err := check(r.Body); err != nil {
					b.Fatalf("%s %s: %v", r.Operation, r.UID, err)
				}
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				if err := tc.read(reviews[i%len(reviews)].Body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

package sidebyside

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"

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
// The floor's handler, which decodes nothing, is what every one of them
// is measured above in the side-by-side run.
func BenchmarkReadingReviews(b *testing.B) {
	reviews, err := buildReviews(64)
	if err != nil {
		b.Fatal(err)
	}
	fg, _ := newWebhook(b, testStates[stateActive].fence, nil)
	serve := func(h http.Handler, path string) func([]byte) error {
		return func(body []byte) error {
			req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != http.StatusOK || w.Body.Len() == 0 {
				return fmt.Errorf("HTTP %d: %s", w.Code, truncate(w.Body.Bytes()))
			}
			return nil
		}
	}
	for _, tc := range []struct {
		name string
		read func([]byte) error
	}{
		{"fencegate", serve(fg.Handler(), webhook.PathValidate)},
		{"allow-all-webhook", serve(allowAll(), "/")},
		{"json-decode", func(body []byte) error {
			var review admissionv1.AdmissionReview
			return json.Unmarshal(body, &review)
		}},
		{"json-valid", func(body []byte) error {
			if !json.Valid(body) {
				return errors.New("the review is not JSON")
			}
			return nil
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
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

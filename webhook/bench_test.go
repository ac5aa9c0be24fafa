package webhook_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/engine/enginetest"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/webhook"
)

// discardWriter is a ResponseWriter that only counts, so that the benchmark
// measures the handler rather than a recorder.
type discardWriter struct {
	header http.Header
	code   int
	n      int
}

func (w *discardWriter) Header() http.Header         { return w.header }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }
func (w *discardWriter) Write(b []byte) (int, error) { w.n += len(b); return len(b), nil }

// BenchmarkDecision measures the whole decision path of the webhook: body
// bytes → decode → evaluation → response bytes, with the decision log
// written as JSON (to nowhere) and the metrics recorded, for a realistic
// UPDATE of about 6.5 KB (object and old object with managedFields, labels,
// annotations, kubectl's last-applied configuration).
//
//   - default: the engine as it runs; requests that differ only in what
//     the policy ignores share remembered decisions.
//   - evaluated: every request has a fence annotation value never seen
//     before, so each one evaluates the residual policy.
//
// engine.BenchmarkAdmit sets the engine beside OPA evaluating the whole
// policy with the whole AdmissionReview.
func BenchmarkDecision(b *testing.B) {
	body := enginetest.LargeUpdate(b)
	// The evaluated variant carries one more annotation, which the residual
	// of every fence status reads, with a value that changes per request.
	const mark = `"fencegate.dev/fenced-by":"east@0000",`
	at := bytes.Index(body, []byte(`"fencegate.dev/token":"1041"`))
	if at < 0 {
		b.Fatal("the fixture has no fencegate.dev/token annotation")
	}
	marked := append(append(bytes.Clone(body[:at]), mark...), body[at:]...)
	digitsAt := at + len(mark) - len(`0000",`)
	states := map[string]fencestate.State{
		"active": enginetest.Fence(fencestate.Active, "east", 7, "east", 7),
		"fenced": enginetest.Fence(fencestate.Fenced, "west", 3, "east", 7),
	}
	for _, mode := range []string{"default", "evaluated"} {
		for _, stateName := range []string{"active", "fenced"} {
			for _, path := range []string{webhook.PathValidate, webhook.PathMutate} {
				b.Run(fmt.Sprintf("%s/%s/%s", path[1:], stateName, mode), func(b *testing.B) {
					handler := benchHandler(b, states[stateName])
					req := &http.Request{Method: http.MethodPost, URL: &url.URL{Path: path}, Header: http.Header{"Content-Type": {"application/json"}}}
					w := &discardWriter{header: http.Header{}}
					own := bytes.Clone(body)
					if mode == "evaluated" {
						own = bytes.Clone(marked)
					}
					reader := bytes.NewReader(own)
					b.SetBytes(int64(len(own)))
					b.ReportAllocs()
					i := 0
					for b.Loop() {
						if mode == "evaluated" {
							// Four digits, cycling through more values than
							// the decision cache holds.
							i++
							copy(own[digitsAt:], fmt.Sprintf("%04d", i%10000))
						}
						reader.Reset(own)
						req.Body = io.NopCloser(reader)
						w.code, w.n = 0, 0
						handler.ServeHTTP(w, req)
						if w.code != 0 && w.code != http.StatusOK {
							b.Fatalf("HTTP %d", w.code)
						}
					}
				})
			}
		}
	}
}

// benchHandler is a webhook over a new engine holding state, logging JSON
// to nowhere.
func benchHandler(b *testing.B, state fencestate.State) http.Handler {
	b.Helper()
	e, err := engine.New(engine.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if err := e.WriteFence(context.Background(), state); err != nil {
		b.Fatal(err)
	}
	s, err := webhook.New(webhook.Options{
		Addr: "127.0.0.1:0", CertDir: b.TempDir(), Engine: e, Registerer: prometheus.NewRegistry(),
		Logger: zap.New(zap.WriteTo(io.Discard), zap.JSONEncoder()),
	})
	if err != nil {
		b.Fatal(err)
	}
	return s.Handler()
}

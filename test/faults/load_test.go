package faults

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/engine/enginetest"
)

// request is one admission request a load worker sends.
type request struct {
	path string
	body []byte
}

// answer is what one request got.
type answer struct {
	// at is when the request was sent, since the load began.
	at time.Duration
	// took is how long the answer took.
	took time.Duration
	// fresh is set when it went over a new connection.
	fresh bool
	path  string
	// err is a transport error or an HTTP status other than 200: a failed
	// request, which a webhook that fails closed turns into a refused
	// Component change.
	err error
	// response is the AdmissionReview's response.
	response *admissionv1.AdmissionResponse
}

// token is the fencing token a mutation stamped, or 0.
func (a answer) token() uint64 {
	if a.response == nil || a.response.Patch == nil {
		return 0
	}
	var patch []engine.PatchOperation
	if json.Unmarshal(a.response.Patch, &patch) != nil {
		return 0
	}
	return enginetest.StampedToken(patch, "")
}

// message is a denial's message.
func (a answer) message() string {
	if a.response == nil || a.response.Result == nil {
		return ""
	}
	return a.response.Result.Message
}

// load sends admission requests to one webhook from workers on kept-alive
// connections and workers that open a new connection per request, until
// it is stopped.
type load struct {
	base  string
	roots *x509.CertPool
	pick  func(worker, i int) request
	begin time.Time
	stop  context.CancelFunc
	wg    sync.WaitGroup
	// keptAlive is the client of the workers that keep connections.
	keptAlive *http.Client

	mu      sync.Mutex
	answers []answer
}

// startLoad starts workers per kind of connection against the webhook at
// addr, whose certificate chains to roots.
func startLoad(t *testing.T, addr string, roots *x509.CertPool, workers int, pick func(worker, i int) request) *load {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{base: "https://" + addr, roots: roots, pick: pick, begin: time.Now(), stop: cancel}
	l.keptAlive = l.client(false)
	for w := range 2 * workers {
		fresh := w%2 == 1
		l.wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				c := l.keptAlive
				if fresh {
					c = l.client(true)
				}
				l.send(ctx, c, fresh, pick(w, i))
				if fresh {
					// Also when the request was cut short: a
					// connection left open would hold up the server's
					// graceful shutdown.
					c.CloseIdleConnections()
				}
				// A little apart: the load shares two cores with the
				// servers it loads.
				time.Sleep(time.Millisecond)
			}
		})
	}
	t.Cleanup(l.end)
	return l
}

func (l *load) client(fresh bool) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: l.roots, MinVersion: tls.VersionTLS12},
		DisableKeepAlives: fresh,
		ForceAttemptHTTP2: true,
	}}
}

func (l *load) send(ctx context.Context, c *http.Client, fresh bool, r request) {
	a := answer{at: time.Since(l.begin), fresh: fresh, path: r.path}
	defer func() {
		a.took = time.Since(l.begin) - a.at
		if ctx.Err() != nil && a.err != nil {
			return // cut short by stop
		}
		l.mu.Lock()
		l.answers = append(l.answers, a)
		l.mu.Unlock()
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.base+r.path, bytes.NewReader(r.body))
	if err != nil {
		a.err = err
		return
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		a.err = err
		return
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	switch {
	case err != nil:
		a.err = fmt.Errorf("read the response: %w", err)
	case resp.StatusCode != http.StatusOK:
		a.err = fmt.Errorf("HTTP %d: %s", resp.StatusCode, body)
	default:
		var review admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &review); err != nil {
			a.err = fmt.Errorf("not an AdmissionReview: %s: %w", body, err)
			return
		}
		if review.Response == nil {
			a.err = fmt.Errorf("an AdmissionReview without a response: %s", body)
			return
		}
		a.response = review.Response
	}
}

// end stops the workers, waits for them and closes their connections; it
// is idempotent.
func (l *load) end() {
	l.stop()
	l.wg.Wait()
	l.keptAlive.CloseIdleConnections()
}

// since returns the answers to requests sent at or after at.
func (l *load) since(at time.Duration) []answer {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []answer
	for _, a := range l.answers {
		if a.at >= at {
			out = append(out, a)
		}
	}
	return out
}

// now is the load's clock, to mark moments for since.
func (l *load) now() time.Duration { return time.Since(l.begin) }

// failures returns the failed requests, at most a few, and how many there
// were.
func failures(answers []answer) ([]string, int) {
	var out []string
	n := 0
	for _, a := range answers {
		if a.err == nil {
			continue
		}
		if n++; n <= 5 {
			out = append(out, fmt.Sprintf("%s at %s (fresh connection: %v): %v", a.path, a.at.Round(time.Millisecond), a.fresh, a.err))
		}
	}
	return out, n
}

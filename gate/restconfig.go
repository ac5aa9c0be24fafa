package gate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"k8s.io/client-go/rest"
)

// ReasonNoReconcile is the reason a write through RESTConfig is refused
// when its context is not a gated reconcile's: no hold covers it.
const ReasonNoReconcile = "NoGatedReconcile"

// RESTConfig returns a copy of cfg for a client that the Gate cannot wrap:
// an SDK that builds its own (Helm's action configuration, a generated
// clientset). Every write it sends (any request but GET, HEAD and OPTIONS)
// runs under the hold of ctx's gated reconcile:
//   - it is refused with a *FencedError once that hold changed or ended,
//     or when ctx is not a gated reconcile's;
//   - it is cancelled in flight when the cluster stops holding, whatever
//     context the SDK gave the request;
//   - a LocalOnly teardown's writes pass: they remove this cluster's own
//     copy of what it installed.
//
// Reads pass. Make the config for each reconcile: it is bound to ctx.
// Such writes assert no token (the SDK writes objects of its own); those
// of the gated kinds go through Client.
func RESTConfig(ctx context.Context, cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return &heldTransport{ctx: ctx, next: rt}
	})
	return out
}

// heldTransport runs the writes of a RESTConfig under its reconcile's hold.
type heldTransport struct {
	ctx  context.Context
	next http.RoundTripper
}

func (t *heldTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return t.next.RoundTrip(req)
	}
	if LocalOnly(t.ctx) {
		return t.next.RoundTrip(req)
	}
	hc, ok := holdFrom(t.ctx)
	if !ok {
		return nil, &FencedError{Hold: Hold{Reason: ReasonNoReconcile, Message: fmt.Sprintf("%s %s is not made under a gated reconcile", req.Method, req.URL.Path)}}
	}
	if err := context.Cause(hc); err != nil {
		return nil, err
	}
	// The request ends with the hold, whatever context it was given.
	reqCtx, cancel := context.WithCancelCause(req.Context())
	stop := context.AfterFunc(hc, func() { cancel(context.Cause(hc)) })
	resp, err := t.next.RoundTrip(req.WithContext(reqCtx))
	if err != nil {
		stop()
		cancel(nil)
		if cause := context.Cause(reqCtx); cause != nil && !errors.Is(cause, context.Canceled) {
			return nil, fmt.Errorf("%w (the write was cancelled: %w)", cause, err)
		}
		return nil, err
	}
	// The body is read after RoundTrip returns: release the request's
	// context when it is closed.
	resp.Body = &releaseOnClose{ReadCloser: resp.Body, release: func() { stop(); cancel(nil) }}
	return resp, nil
}

// releaseOnClose releases a request's context once its body is closed.
type releaseOnClose struct {
	io.ReadCloser
	once    sync.Once
	release func()
}

func (r *releaseOnClose) Close() error {
	err := r.ReadCloser.Close()
	r.once.Do(r.release)
	return err
}

package gate

import (
	"context"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// holdContext is the context of work decided under one hold: cancelled,
// with a FencedError as its cause, when the domain's hold changes or ends.
type holdContext struct {
	context.Context
	hold   Hold
	cancel context.CancelCauseFunc
	mu     sync.Mutex
	timer  clock.Timer
}

type holdKey struct{}

type localOnlyKey struct{}

// begin starts work under domain d's hold, if the cluster holds it: the
// context returned ends when the hold does, and done must be called when
// the work ends. Registration and the hold read happen under one lock, so
// no transition is missed between them.
func (g *Gate) begin(ctx context.Context, d string) (Hold, context.Context, func()) {
	h := g.Hold(ctx, d)
	g.mu.Lock()
	defer g.mu.Unlock()
	if last, ok := g.last[d]; ok {
		h = g.expired(last)
	}
	if !h.Holding {
		return h, ctx, func() {}
	}
	inner, cancel := context.WithCancelCause(ctx)
	hc := &holdContext{hold: h, cancel: cancel}
	hc.Context = context.WithValue(inner, holdKey{}, hc)
	hc.timer = g.opts.Clock.AfterFunc(h.Until.Sub(g.opts.Clock.Now()), func() {
		// A clock may call this with a lock of its own held (a fake
		// clock's Step does), which reading it or extend's Reset would
		// wait for: decide elsewhere. A renewal may have moved the end
		// since the timer fired.
		go func() {
			if h := g.expired(hc.currentHold()); !h.Holding {
				cancel(fencedError(h))
			}
		}()
	})
	if g.inflight[d] == nil {
		g.inflight[d] = map[*holdContext]struct{}{}
	}
	g.inflight[d][hc] = struct{}{}
	return h, hc, func() {
		hc.timer.Stop()
		cancel(nil)
		g.mu.Lock()
		delete(g.inflight[d], hc)
		g.mu.Unlock()
	}
}

// currentHold is the hold the work runs under, with its latest end.
func (hc *holdContext) currentHold() Hold {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	return hc.hold
}

// extend moves the end of the work's hold to a renewal's.
func (hc *holdContext) extend(until time.Time, now time.Time) {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	if !until.After(hc.hold.Until) {
		return
	}
	hc.hold.Until = until
	hc.timer.Reset(until.Sub(now))
}

// holdFrom is the hold that ctx's work runs under; false outside a gated
// reconcile.
func holdFrom(ctx context.Context) (*holdContext, bool) {
	hc, ok := ctx.Value(holdKey{}).(*holdContext)
	return hc, ok
}

// LocalOnly says whether the reconcile of ctx runs on a cluster that does
// not hold the fence of its object, for a deletion: it must tear down local
// state only (this cluster's copy of what it installed, its finalizer),
// never what the holder now owns (a cloud resource, a shared record).
func LocalOnly(ctx context.Context) bool {
	v, _ := ctx.Value(localOnlyKey{}).(bool)
	return v
}

// withLocalOnly flags ctx LocalOnly.
func withLocalOnly(ctx context.Context) context.Context {
	return context.WithValue(ctx, localOnlyKey{}, true)
}

package gate_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/gate"
)

// leaving records every write that leaves the gate: the underlying client
// of the gate's write gate, on the real API server.
type leaving struct {
	client.Client
	g      *gate.Gate
	mu     sync.Mutex
	writes []leftWrite
	// began is the hold its reconcile began under, by object name: the
	// hold before the reconcile was called, if it is still the hold as
	// the reconciler starts (else a transition came in between, and which
	// hold the reconcile began under is not known here).
	began sync.Map
}

// leftWrite is one write as it left the gate.
type leftWrite struct {
	name string
	// asserted is the write-token it carries; began is the token its
	// reconcile began under, "" when not known.
	asserted, began string
	// holding says whether the gate held that token as the write left;
	// ctx is the write's context, to tell whether it was cancelled.
	holding bool
	ctx     context.Context
}

func (c *leaving) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	h := c.g.Hold(ctx, "default")
	began, _ := c.began.Load(obj.GetName())
	asserted := obj.GetAnnotations()[gate.WriteTokenAnnotation]
	c.mu.Lock()
	c.writes = append(c.writes, leftWrite{
		name: obj.GetName(), asserted: asserted, began: began.(string),
		holding: h.Holding && strconv.FormatInt(h.Token, 10) == asserted, ctx: ctx,
	})
	c.mu.Unlock()
	return c.Client.Create(ctx, obj, opts...)
}

// TestRandomInterleavings interleaves gated reconciles that write,
// transitions of the fence (new holds, fenced, holds that end unrenewed,
// renewals) and callers that give up, on a real API server. Every write
// that leaves the gate carries the token its reconcile began under; one
// that leaves while the gate does not hold that token any more has its
// context cancelled at once, so the request is cut short; a caller that
// gives up gets its reconcile back at once.
func TestRandomInterleavings(t *testing.T) {
	const rounds = 60
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	t.Logf("seed %d", seed)
	// before is the hold as each reconcile was called, by its name.
	var before sync.Map
	var (
		under  *leaving
		gated  reconcile.Reconciler
		writes client.Client
	)
	l := newLab(t, func(l *lab) {
		under = &leaving{Client: l.cp.Client, g: l.gate}
		var err error
		if writes, err = l.gate.Client(under, &fencegatev1alpha1.Component{}); err != nil {
			t.Fatal(err)
		}
		gated = l.gate.Reconciler(&fencegatev1alpha1.Component{}, reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			began := ""
			if v, ok := before.Load(req.Name); ok && v.(gate.Hold).Holding && l.gate.Hold(ctx, "default").Token == v.(gate.Hold).Token {
				began = strconv.FormatInt(v.(gate.Hold).Token, 10)
			}
			for i := range 1 + rand.IntN(3) {
				c := component(fmt.Sprintf("%s-%d", req.Name, i), "default")
				under.began.Store(c.Name, began)
				if err := writes.Create(ctx, c); err != nil {
					return reconcile.Result{}, err
				}
				time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond)
			}
			return reconcile.Result{}, nil
		}))
	})
	token := int64(100)
	l.fence("default", "active", token)
	l.lease("default", "a", token, l.clock.Now().Add(time.Hour))
	l.await("default", holding(token), "held")
	var reconciles sync.WaitGroup
	var slow atomic.Int32
	n := 0
	for round := range rounds {
		// A few reconciles, some of whose callers give up.
		for range 1 + rng.IntN(6) {
			n++
			name := fmt.Sprintf("r%d", n)
			ctx, cancel := context.WithCancel(l.ctx)
			giveUp := rng.IntN(4) == 0
			before.Store(name, l.gate.Hold(ctx, "default"))
			reconciles.Go(func() {
				defer cancel()
				ended := make(chan struct{})
				go func() {
					defer close(ended)
					_, _ = gated.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "default", Name: name}})
				}()
				if giveUp {
					time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
					cancel()
					select {
					case <-ended:
					case <-time.After(time.Second):
						slow.Add(1)
						<-ended
					}
				}
				<-ended
			})
		}
		time.Sleep(time.Duration(rng.IntN(10)) * time.Millisecond)
		// A transition: mostly renewals and new holds, so that there is
		// work to cut short.
		switch p := rng.IntN(20); {
		case p < 6: // a new hold
			token += 2
			l.fence("default", "active", token)
			l.lease("default", "a", token, l.clock.Now().Add(time.Hour))
		case p < 9: // fenced
			token++
			l.fence("default", "fenced", token)
		case p < 12: // the hold ends unrenewed
			l.clock.Step(2 * time.Hour)
		default: // a renewal of the hold, if any
			l.lease("default", "a", token, l.clock.Now().Add(time.Hour))
		}
		if round%10 == 9 {
			reconciles.Wait()
		}
	}
	reconciles.Wait()

	if s := slow.Load(); s > 0 {
		t.Errorf("%d reconciles whose caller gave up did not return within a second", s)
	}
	left, cut, known := 0, 0, 0
	for _, w := range under.writes {
		left++
		if w.began != "" {
			known++
		}
		if w.began != "" && w.asserted != w.began {
			t.Errorf("write %s left the gate asserting token %s; its reconcile began under %s", w.name, w.asserted, w.began)
		}
		if w.holding {
			continue
		}
		// Left as the hold changed: its context must end at once, so
		// that the request is cut short.
		select {
		case <-w.ctx.Done():
			cut++
			if cause := context.Cause(w.ctx); !errors.Is(cause, gate.ErrFenced) && !errors.Is(cause, context.Canceled) {
				t.Errorf("write %s left as the hold changed and ended with %v", w.name, cause)
			}
		case <-time.After(time.Second):
			t.Errorf("write %s left the gate while it did not hold token %s, and was not cancelled", w.name, w.asserted)
		}
	}
	t.Logf("%d reconciles, %d writes left the gate (%d under a known hold), %d of them as the hold changed (cancelled)", n, left, known, cut)
	if known == 0 {
		t.Fatal("no write left the gate under a known hold: the test proves nothing")
	}
}

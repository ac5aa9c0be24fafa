package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fencegate/fencegate/fencestate"
)

// Bounds of the recent reviews a new revision is tried on.
const (
	// recentReviewsSize is how many recent reviews are kept.
	recentReviewsSize = 8
	// recentReviewMaxBytes bounds a kept review, so that the copies stay
	// small next to the engine's memory: a Component's review is a few KB.
	recentReviewMaxBytes = 64 << 10
	// recentHitInterval is how often a review answered from remembered
	// decisions is kept; an evaluated one always is.
	recentHitInterval = time.Second
)

// recentReviews keeps copies of the last few AdmissionReviews the engine
// decided: every review it evaluated and, at most once a second, one it
// answered from remembered decisions (which repeat what was evaluated
// before). A new policy revision is tried on them before it serves.
type recentReviews struct {
	mu     sync.Mutex
	bodies [recentReviewsSize][]byte
	next   int
	// lastHitNS is when the last remembered-decision review was kept.
	lastHitNS atomic.Int64
}

// record keeps a copy of body, a review decided without error at now.
func (r *recentReviews) record(body []byte, evaluated bool, now time.Time) {
	if len(body) > recentReviewMaxBytes {
		return
	}
	if !evaluated {
		last, at := r.lastHitNS.Load(), now.UnixNano()
		if at-last < int64(recentHitInterval) || !r.lastHitNS.CompareAndSwap(last, at) {
			return
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	slot := &r.bodies[r.next]
	*slot = append((*slot)[:0], body...)
	r.next = (r.next + 1) % len(r.bodies)
}

// list returns copies of the kept reviews.
func (r *recentReviews) list() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out [][]byte
	for _, b := range r.bodies {
		if len(b) > 0 {
			out = append(out, append([]byte(nil), b...))
		}
	}
	return out
}

// probeComponent is the Component of the synthetic reviews and of the
// reconcile probe.
const probeComponent = `{"apiVersion":"components.fencegate.dev/v1alpha1","kind":"Component",` +
	`"metadata":{"name":"fencegate-probe","namespace":"default","generation":1,` +
	`"annotations":{"fencegate.dev/epoch":"1","fencegate.dev/token":"1"}},` +
	`"spec":{"enabled":true,"chart":{"repository":"https://charts.example.com","name":"probe","version":"1.0.0"}}}`

// probeRequests are the synthetic requests every revision is tried on: each
// operation the webhook configurations send, and the controller's status
// update.
var probeRequests = []ReviewRequest{
	{UID: "probe-create", Operation: "CREATE", Object: []byte(probeComponent)},
	{UID: "probe-update", Operation: "UPDATE", Object: []byte(probeComponent), OldObject: []byte(probeComponent)},
	{UID: "probe-delete", Operation: "DELETE", OldObject: []byte(probeComponent)},
	{UID: "probe-status", Operation: "UPDATE", SubResource: "status", Object: []byte(probeComponent), OldObject: []byte(probeComponent)},
}

// probe is one review a revision is tried on, with what to call it in an
// error.
type probe struct {
	name string
	body []byte
}

// probes returns the synthetic reviews and the recent ones.
func (e *Engine) probes() ([]probe, error) {
	var out []probe
	for _, r := range probeRequests {
		body, err := BuildReview(r)
		if err != nil {
			return nil, fmt.Errorf("build the synthetic %s review: %w", r.Operation, err)
		}
		name := "a synthetic " + r.Operation + " of a Component"
		if r.SubResource != "" {
			name = "a synthetic " + r.SubResource + " update of a Component"
		}
		out = append(out, probe{name: name, body: body})
	}
	for _, body := range e.recent.list() {
		out = append(out, probe{name: "a recent review", body: body})
	}
	return out, nil
}

// probeStates are the fence states a revision is tried on besides the one
// in force: every status, for the cluster in force (or a stand-in before
// the agent wrote a state).
func probeStates(current *fencestate.State) []fencestate.State {
	base := fencestate.State{
		Domain:  "default",
		Cluster: fencestate.Cluster{Name: "this-cluster", UID: "this-cluster-uid", Epoch: 1},
		Holder:  fencestate.Cluster{Name: "other-cluster", UID: "other-cluster-uid", Epoch: 2},
		Token:   1,
	}
	if current != nil {
		base = *current
	}
	base.ValidUntilNS = 0
	var states []fencestate.State
	for _, status := range fencestate.Statuses() {
		if current != nil && status == current.Status {
			continue
		}
		s := base
		s.Status = status
		if status == fencestate.Active {
			s.Holder = s.Cluster
		}
		states = append(states, s)
	}
	return states
}

// try evaluates revision p, before it serves, with serving (its snapshot
// of the fence state in force, nil before the agent wrote one) and with a
// snapshot of every other fence status, on every entry point fencegate
// evaluates: admission on the probes, reconcile on a Component and, when
// kinds are held, hold on the hold probes. A revision that compiles but
// fails at evaluation is refused as one that does not compile; so is one
// without a hold decision while kinds are held.
func (e *Engine) try(ctx context.Context, p *policy, serving *snapshot) error {
	probes, err := e.probes()
	if err != nil {
		return err
	}
	var holds []holdProbe
	if len(e.holdKinds) > 0 {
		if p.hold == nil {
			return fmt.Errorf("kinds are held here (%s), but %w; add the shipped hold.rego (package fencegate.hold) to the policies",
				joinKinds(e.holdKinds), ErrNoHoldPolicy)
		}
		if holds, err = e.holdProbesOf(); err != nil {
			return err
		}
	}
	var current *fencestate.State
	var snaps []*snapshot
	if serving != nil && serving.hasFence {
		current = &serving.fence
		snaps = append(snaps, serving)
	}
	for _, state := range probeStates(current) {
		snap, err := newSnapshot(ctx, p, &state, nil)
		if err != nil {
			return err
		}
		snaps = append(snaps, snap)
	}
	now := e.clock.Now()
	var component map[string]any
	if err := json.Unmarshal([]byte(probeComponent), &component); err != nil {
		return fmt.Errorf("decode the probe Component: %w", err)
	}
	for _, snap := range snaps {
		status := snap.fence.Status
		for _, pr := range probes {
			if err := snap.probe(ctx, pr.body, now); err != nil {
				return fmt.Errorf("the policies fail on %s while the fence is %s: %w", pr.name, status, err)
			}
		}
		if _, err := snap.reconcile(ctx, component, now); err != nil {
			return fmt.Errorf("the policies fail to reconcile a Component while the fence is %s: %w", status, err)
		}
		if err := snap.tryHold(ctx, holds, now); err != nil {
			return err
		}
	}
	return nil
}

// joinKinds names held kinds as resource.group, as --hold-kinds takes
// them.
func joinKinds(kinds []schema.GroupResource) string {
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = k.String()
	}
	return strings.Join(names, ", ")
}

// probe decides one review with s; a body that is no AdmissionReview the
// engine can decode is no failure of the policies.
func (s *snapshot) probe(ctx context.Context, body []byte, now time.Time) error {
	review, err := parseReview(body, nil)
	if err != nil {
		return nil
	}
	defer review.release()
	if _, err := decodeRequest(review.request()); err != nil {
		return nil
	}
	_, _, err = s.decide(ctx, review, now)
	return err
}

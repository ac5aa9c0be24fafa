package marks

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/fencegate/fencegate/fencestate"
)

// Kind marks the objects of one kind, each in the tracker of the domain it
// belongs to: the marks protocol every marking controller follows, written
// once so that what the Fence reports from the marks (Enforced, Quiesced)
// means the same whoever marked. A reconcile calls Decide before it asks
// the policies, Decided once they answered, and Mark once the object is as
// they decided; Forget when the object is gone.
type Kind[V comparable] struct {
	domains  Domains
	trackers map[string]*Tracker[V]
	changed  func(d string, t *Tracker[V])
}

// NewKind returns the protocol for one kind over domains: trackers holds
// one tracker for each served domain, and changed (nil for none) is called
// after each mark, and after each object forgotten, with the domain and
// its tracker.
func NewKind[V comparable](domains Domains, trackers map[string]*Tracker[V], changed func(d string, t *Tracker[V])) *Kind[V] {
	return &Kind[V]{domains: domains, trackers: trackers, changed: changed}
}

// Domains are the domains the kind's objects are placed in.
func (k *Kind[V]) Domains() Domains { return k.domains }

// Tracker is domain d's tracker; nil for a domain not served.
func (k *Kind[V]) Tracker(d string) *Tracker[V] { return k.trackers[d] }

// Source is a controller source that enqueues every object list names
// when it starts and on each change of domain d's fence state, and begins
// a generation of d's tracker for the state of that moment with them (see
// Tracker.Source); what names the objects in its log.
func (k *Kind[V]) Source(d string, list func(context.Context) ([]types.NamespacedName, error), what string) source.Source {
	return k.trackers[d].Source(func() fencestate.Key { return k.domains.State(d).Key() }, k.domains.Fences[d].Subscribe(), list, what)
}

// Decision is one reconcile's way through the protocol.
type Decision[V comparable] struct {
	kind    *Kind[V]
	name    types.NamespacedName
	tracker *Tracker[V]
	gen     uint64
	// Domain is the object's domain.
	Domain string
	// Before is the domain's fence state when the decision began; After
	// is its state once the policies answered (set by Decided).
	Before, After fencestate.State
}

// Decide begins a decision for obj: it places obj in its domain, forgets
// it in every other domain (it moved), and notes the generation the
// reconcile starts in, then the domain's fence state: in this order, so
// that a generation begun with a later state is not marked with this one.
// It returns the error of placing obj unwrapped.
func (k *Kind[V]) Decide(ctx context.Context, obj client.Object) (*Decision[V], error) {
	d, err := k.domains.Of(ctx, obj)
	if err != nil {
		return nil, err
	}
	dec := &Decision[V]{kind: k, name: client.ObjectKeyFromObject(obj), tracker: k.trackers[d], Domain: d}
	k.forget(dec.name, d)
	if dec.tracker != nil {
		dec.gen = dec.tracker.Generation()
	}
	dec.Before = k.domains.State(d)
	return dec, nil
}

// Decided reads the domain's fence state once the policies answered, and
// returns it.
func (dec *Decision[V]) Decided() fencestate.State {
	dec.After = dec.kind.domains.State(dec.Domain)
	return dec.After
}

// Mark records v as the object's mark in its domain, once the object is as
// decided. It counts for the generation the reconcile started in only when
// the state was that generation's before and after the decision (Decided
// must have been called: a mark without the state after counts for no
// generation). A domain not served takes no marks.
func (dec *Decision[V]) Mark(v V) {
	if dec.tracker == nil {
		return
	}
	dec.tracker.Mark(dec.name, dec.gen, dec.Before.Key(), dec.After.Key(), v)
	dec.kind.notify(dec.Domain, dec.tracker)
}

// Forget drops the object from every domain's tracker: it was deleted, or
// is no longer one to mark.
func (k *Kind[V]) Forget(name types.NamespacedName) { k.forget(name, "") }

// forget drops the object from every domain's tracker but keep's.
func (k *Kind[V]) forget(name types.NamespacedName, keep string) {
	for d, t := range k.trackers {
		if d != keep && t.Gone(name) {
			k.notify(d, t)
		}
	}
}

// notify calls changed, if any.
func (k *Kind[V]) notify(d string, t *Tracker[V]) {
	if k.changed != nil {
		k.changed(d, t)
	}
}

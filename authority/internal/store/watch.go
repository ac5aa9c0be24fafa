package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate/authority/statemachine"
)

// Event is what a watcher hears: the fence after a change.
type Event struct {
	// Types lists what changed, most significant first; it is empty for
	// the snapshot a watch starts with.
	Types []statemachine.EventType
	// Snapshot is the fence after the change.
	Snapshot Snapshot
}

// errWatchBroken marks an etcd watch that ended without the caller asking:
// compaction, a lost leader, a closed connection.
var errWatchBroken = errors.New("etcd watch ended")

// errFellBehind ends the subscription of a watcher that did not take the
// changes as fast as they came: it reads the fence again.
var errFellBehind = errors.New("the watcher fell behind its domain's changes")

// subscriptionBuffer is how many changes a watcher may have yet to take
// before it is cut off and reads the fence again. Heartbeats are no
// changes, so changes are rare: a holder, a release, a pending takeover.
const subscriptionBuffer = 64

// Watch calls fn with the (normalized) domain's current fence, then with the fence after
// each change of holder, release or pending takeover, in order, until ctx
// ends (it returns ctx.Err()) or fn returns an error (it returns that). It
// follows the domain's keys in etcd, so it sees the changes made by every
// authority that shares the etcd. When the etcd watch breaks, or fn took
// the changes too slowly, it reads the fence again and reports what
// changed meanwhile as one event.
//
// All the watchers of a domain in this process share one etcd watch (a
// domainWatch): every write of the domain's record, each heartbeat
// included, reaches this process once, however many agents watch.
func (s *Store) Watch(ctx context.Context, domain string, fn func(Event) error) error {
	snap, resp, err := s.read(ctx, domain)
	if err != nil {
		return err
	}
	// The watch follows the record from this read on: a record cached
	// before it may be older (see domainEntry.fresh).
	entry := s.entry(domain)
	entry.saw(snap.Revision)
	if err := fn(Event{Snapshot: snap}); err != nil {
		return err
	}
	w := &watcher{fn: fn, last: snap, seen: resp.Header.Revision}
	retry := backoff.NewExponentialBackOff()
	retry.InitialInterval, retry.MaxInterval = 50*time.Millisecond, 2*time.Second
	for {
		err := w.follow(ctx, s.subscribe(domain, entry, snap, resp))
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !errors.Is(err, errFellBehind) {
			return err
		}
		for {
			if snap, resp, err = s.read(ctx, domain); err == nil {
				break
			}
			if !IsUnavailable(err) {
				return err
			}
			if err := s.wait(ctx, retry.NextBackOff()); err != nil {
				return ctx.Err()
			}
		}
		retry.Reset()
		w.seen = resp.Header.Revision
		if err := w.deliver(changes(w.last, snap), snap); err != nil {
			return err
		}
	}
}

// changes lists what changed from old to next (statemachine.Changes).
func changes(old, next Snapshot) []statemachine.EventType {
	return statemachine.Changes(old.State, next.State)
}

// watcher is one Watch call: what it reported last, and the etcd revision
// its view of the domain is at.
type watcher struct {
	fn   func(Event) error
	last Snapshot
	seen int64
}

// follow reports the changes sub brings until ctx ends, fn fails or the
// subscription ends (its error).
func (w *watcher) follow(ctx context.Context, sub *subscription) error {
	defer sub.cancel()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case u, ok := <-sub.updates:
			if !ok {
				return sub.err
			}
			if u.rev <= w.seen {
				// Already in the fence this watcher read.
				continue
			}
			w.seen = u.rev
			types := u.types
			if u.catchUp {
				types = changes(w.last, u.snap)
			}
			if err := w.deliver(types, u.snap); err != nil {
				return err
			}
		}
	}
}

// deliver reports snap to fn when something changed.
func (w *watcher) deliver(types []statemachine.EventType, snap Snapshot) error {
	w.last = snap
	if len(types) == 0 {
		return nil
	}
	return w.fn(Event{Types: types, Snapshot: snap})
}

// update is a change a domainWatch hands its subscribers.
type update struct {
	// snap is the fence at etcd revision rev; types is what changed from
	// the fence at the revision before.
	snap  Snapshot
	rev   int64
	types []statemachine.EventType
	// catchUp marks the fence handed to a subscriber that joined a watch
	// ahead of the revision it read: what changed is the subscriber's to
	// work out.
	catchUp bool
}

// subscription is one watcher's place in a domainWatch.
type subscription struct {
	updates chan update
	// err says why updates was closed: errFellBehind, or the watch's
	// failure. Written before the close.
	err    error
	cancel func()
}

// domainWatch is the one etcd watch of a domain shared by this process's
// watchers of it. It decodes each revision once and hands its subscribers
// only the revisions that change what they report; it stops when its last
// subscriber leaves.
type domainWatch struct {
	store *Store
	// entry is the domain's, which hears of each revision the watch sees
	// without the store's lock: dw.mu is held then, and the store's lock
	// is taken before dw.mu elsewhere.
	entry  *domainEntry
	domain string
	stop   context.CancelFunc

	mu   sync.Mutex
	subs map[*subscription]struct{}
	// kvs are the domain's keys as of revision from-1; last is their
	// fence, decoded from the state and grant keys at the mod revisions
	// state and grant.
	kvs          map[string]*mvccpb.KeyValue
	from         int64
	last         Snapshot
	state, grant int64
}

// subscribe joins the domain's watch, starting one from resp (a read of
// the domain) and snap (its fence) when there is none; entry is the
// domain's.
func (s *Store) subscribe(domain string, entry *domainEntry, snap Snapshot, resp *clientv3.GetResponse) *subscription {
	s.mu.Lock()
	defer s.mu.Unlock()
	dw, ok := s.watches[domain]
	if !ok {
		ctx, stop := context.WithCancel(context.Background())
		dw = &domainWatch{store: s, entry: entry, domain: domain, stop: stop, subs: map[*subscription]struct{}{}}
		dw.reset(resp)
		dw.last, dw.state, dw.grant = snap, dw.modRevision(s.stateKey(domain)), dw.modRevision(s.grantKey(domain))
		if s.watches == nil {
			s.watches = map[string]*domainWatch{}
		}
		s.watches[domain] = dw
		s.metrics.etcdWatches.Inc()
		go dw.run(ctx)
	}
	sub := &subscription{updates: make(chan update, subscriptionBuffer)}
	sub.cancel = func() { s.unsubscribe(dw, sub) }
	dw.mu.Lock()
	defer dw.mu.Unlock()
	dw.subs[sub] = struct{}{}
	// The watch may be past the revision the subscriber read; the fence it
	// is at then is the subscriber's first update.
	sub.updates <- update{snap: dw.last, rev: dw.from - 1, catchUp: true}
	return sub
}

// unsubscribe leaves dw, stopping it when sub was its last subscriber.
func (s *Store) unsubscribe(dw *domainWatch, sub *subscription) {
	s.mu.Lock()
	defer s.mu.Unlock()
	dw.mu.Lock()
	delete(dw.subs, sub)
	last := len(dw.subs) == 0
	dw.mu.Unlock()
	if last && s.watches[dw.domain] == dw {
		delete(s.watches, dw.domain)
		s.metrics.etcdWatches.Dec()
		dw.stop()
	}
}

// end closes every subscription with err and takes dw out of the store,
// so that the next watcher starts a watch of its own.
func (dw *domainWatch) end(err error) {
	s := dw.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watches[dw.domain] == dw {
		delete(s.watches, dw.domain)
		s.metrics.etcdWatches.Dec()
	}
	dw.mu.Lock()
	defer dw.mu.Unlock()
	for sub := range dw.subs {
		sub.err = err
		close(sub.updates)
		delete(dw.subs, sub)
	}
	dw.stop()
}

func (dw *domainWatch) reset(resp *clientv3.GetResponse) {
	dw.kvs = map[string]*mvccpb.KeyValue{}
	for _, kv := range resp.Kvs {
		dw.kvs[string(kv.Key)] = kv
	}
	dw.from = resp.Header.Revision + 1
	// Decoded again: the keys read may be those decoded last, yet the
	// changes since are to be handed on all the same.
	dw.state, dw.grant = -1, -1
}

// modRevision is the mod revision of key among dw's keys; 0 when absent.
func (dw *domainWatch) modRevision(key string) int64 {
	if kv := dw.kvs[key]; kv != nil {
		return kv.ModRevision
	}
	return 0
}

// run follows the domain in etcd until ctx ends, reading the fence again
// whenever the etcd watch breaks; a failure other than etcd being
// unavailable ends every subscription with it.
func (dw *domainWatch) run(ctx context.Context) {
	retry := backoff.NewExponentialBackOff()
	retry.InitialInterval, retry.MaxInterval = 50*time.Millisecond, 2*time.Second
	for {
		err := dw.follow(ctx)
		if ctx.Err() != nil {
			return
		}
		if !errors.Is(err, errWatchBroken) {
			dw.end(err)
			return
		}
		if err := dw.store.wait(ctx, retry.NextBackOff()); err != nil {
			return
		}
		_, resp, err := dw.store.read(ctx, dw.domain)
		switch {
		case err == nil:
			dw.mu.Lock()
			dw.reset(resp)
			err := dw.advance()
			dw.mu.Unlock()
			if err != nil {
				dw.end(err)
				return
			}
		case ctx.Err() != nil:
			return
		case !IsUnavailable(err):
			dw.end(err)
			return
		}
	}
}

// follow runs one etcd watch from dw.from until it ends.
func (dw *domainWatch) follow(ctx context.Context) error {
	// A watch on a member that lost its leader would wait silently; this
	// makes etcd end it, so the next one finds a member with a leader.
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	dw.mu.Lock()
	from := dw.from
	dw.mu.Unlock()
	ch := dw.store.client.Watch(wctx, dw.store.domainPrefix(dw.domain), clientv3.WithPrefix(), clientv3.WithRev(from))
	for resp := range ch {
		if err := resp.Err(); err != nil {
			return fmt.Errorf("%w: %w", errWatchBroken, err)
		}
		events := resp.Events
		for len(events) > 0 {
			// The keys one transaction wrote share its revision: apply them
			// together, so a grant's state and token are seen at once.
			rev := events[0].Kv.ModRevision
			n := 1
			for n < len(events) && events[n].Kv.ModRevision == rev {
				n++
			}
			dw.mu.Lock()
			for _, ev := range events[:n] {
				if ev.Type == clientv3.EventTypeDelete {
					delete(dw.kvs, string(ev.Kv.Key))
				} else {
					dw.kvs[string(ev.Kv.Key)] = ev.Kv
				}
			}
			dw.from = rev + 1
			// Decoded and handed on under the same lock: a subscriber that
			// joins sees both the revision and its fence, or neither.
			err := dw.advance()
			dw.mu.Unlock()
			if err != nil {
				return err
			}
			events = events[n:]
		}
	}
	return errWatchBroken
}

// advance decodes the domain's keys, when its state or grant key moved
// since they were decoded last, and hands the subscribers the fence if
// it changed. dw.mu is held.
func (dw *domainWatch) advance() error {
	state, grant := dw.modRevision(dw.store.stateKey(dw.domain)), dw.modRevision(dw.store.grantKey(dw.domain))
	if state == dw.state && grant == dw.grant {
		return nil
	}
	// Another replica's change ends the cached record's freshness at
	// once, not only after cachedAnswerFor.
	dw.entry.saw(state)
	snap, err := dw.store.decode(dw.domain, slices.Collect(maps.Values(dw.kvs)))
	if err != nil {
		return err
	}
	prev := dw.last
	dw.last, dw.state, dw.grant = snap, state, grant
	types := changes(prev, snap)
	if len(types) == 0 {
		return nil
	}
	u := update{snap: snap, rev: dw.from - 1, types: types}
	for sub := range dw.subs {
		select {
		case sub.updates <- u:
		default:
			sub.err = errFellBehind
			close(sub.updates)
			delete(dw.subs, sub)
		}
	}
	return nil
}

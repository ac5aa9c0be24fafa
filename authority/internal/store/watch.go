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

// Watch calls fn with the (normalized) domain's current fence, then with the fence after
// each change of holder, release or pending takeover, in order, until ctx
// ends (it returns ctx.Err()) or fn returns an error (it returns that). It
// follows the domain's keys in etcd, so it sees the changes made by every
// authority that shares the etcd. When the etcd watch breaks it reads the
// fence again and reports what changed meanwhile as one event.
func (s *Store) Watch(ctx context.Context, domain string, fn func(Event) error) error {
	snap, resp, err := s.read(ctx, domain)
	if err != nil {
		return err
	}
	if err := fn(Event{Snapshot: snap}); err != nil {
		return err
	}
	w := &watcher{store: s, domain: domain, fn: fn, last: snap}
	w.reset(resp)

	retry := backoff.NewExponentialBackOff()
	retry.InitialInterval, retry.MaxInterval = 50*time.Millisecond, 2*time.Second
	for {
		err := w.follow(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !errors.Is(err, errWatchBroken) {
			return err
		}
		if err := s.wait(ctx, retry.NextBackOff()); err != nil {
			return ctx.Err()
		}
		snap, resp, err := s.read(ctx, domain)
		switch {
		case err == nil:
			w.reset(resp)
			if err := w.deliver(snap); err != nil {
				return err
			}
		case !IsUnavailable(err):
			return err
		}
	}
}

// watcher follows one domain for one Watch call.
type watcher struct {
	store  *Store
	domain string
	fn     func(Event) error
	// kvs are the domain's keys as of revision from-1.
	kvs  map[string]*mvccpb.KeyValue
	from int64
	last Snapshot
}

func (w *watcher) reset(resp *clientv3.GetResponse) {
	w.kvs = map[string]*mvccpb.KeyValue{}
	for _, kv := range resp.Kvs {
		w.kvs[string(kv.Key)] = kv
	}
	w.from = resp.Header.Revision + 1
}

// follow runs one etcd watch from w.from until it ends.
func (w *watcher) follow(ctx context.Context) error {
	// A watch on a member that lost its leader would wait silently; this
	// makes etcd end it, so the next one finds a member with a leader.
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	ch := w.store.client.Watch(wctx, w.store.domainPrefix(w.domain), clientv3.WithPrefix(), clientv3.WithRev(w.from))
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
			for _, ev := range events[:n] {
				if ev.Type == clientv3.EventTypeDelete {
					delete(w.kvs, string(ev.Kv.Key))
				} else {
					w.kvs[string(ev.Kv.Key)] = ev.Kv
				}
			}
			events = events[n:]
			w.from = rev + 1
			snap, err := w.store.watched.decode(w.store, w.domain, w.kvs)
			if err != nil {
				return err
			}
			if err := w.deliver(snap); err != nil {
				return err
			}
		}
	}
	return errWatchBroken
}

// watchedSnapshots shares decoded snapshots among the watchers of each
// domain. Every change of a domain's record wakes each of its watchers,
// a heartbeat too, which changes nothing they report; decoding the record
// once per revision rather than once per watcher is most of what many
// watchers cost. The snapshots it shares are only read.
type watchedSnapshots struct {
	mu   sync.Mutex
	last map[string]watchedSnapshot
}

// watchedSnapshot is the snapshot a domain's keys decoded to at the mod
// revisions of its state and grant keys (0: absent).
type watchedSnapshot struct {
	state, grant int64
	snap         Snapshot
}

// decode returns the snapshot of a domain's keys, decoding them only if
// they are not the keys it decoded last for the domain.
func (ws *watchedSnapshots) decode(s *Store, domain string, kvs map[string]*mvccpb.KeyValue) (Snapshot, error) {
	var key watchedSnapshot
	if kv := kvs[s.stateKey(domain)]; kv != nil {
		key.state = kv.ModRevision
	}
	if kv := kvs[s.grantKey(domain)]; kv != nil {
		key.grant = kv.ModRevision
	}
	ws.mu.Lock()
	last, ok := ws.last[domain]
	ws.mu.Unlock()
	if ok && last.state == key.state && last.grant == key.grant {
		return last.snap, nil
	}
	snap, err := s.decode(domain, slices.Collect(maps.Values(kvs)))
	if err != nil {
		return Snapshot{}, err
	}
	key.snap = snap
	ws.mu.Lock()
	defer ws.mu.Unlock()
	// A watcher behind the others must not put back an older snapshot.
	if cur, ok := ws.last[domain]; !ok || cur.state <= key.state {
		if ws.last == nil {
			ws.last = map[string]watchedSnapshot{}
		}
		ws.last[domain] = key
	}
	return snap, nil
}

// deliver reports snap to fn if it differs from the fence last reported
// in holder, release or pending takeover.
func (w *watcher) deliver(snap Snapshot) error {
	types := statemachine.Changes(w.last.State, snap.State)
	w.last = snap
	if len(types) == 0 {
		return nil
	}
	return w.fn(Event{Types: types, Snapshot: snap})
}

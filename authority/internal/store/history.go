package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate/authority/statemachine"
)

// Each domain keeps its history under <prefix>history/<domain>/, one key per
// entry named by its sequence number (zero-padded, so keys sort as numbers).
// The cursor in the domain's state record says which numbers exist, so that
// the transaction that adds an entry can drop the oldest without reading
// them: the history and the state it explains change together, at one
// revision.

// historyCursor locates the entries of a domain: numbers First to Next-1.
type historyCursor struct {
	First uint64 `json:"first,omitempty"`
	Next  uint64 `json:"next,omitempty"`
}

// historyRecord is the stored JSON of one history entry.
type historyRecord struct {
	Version int `json:"version"`
	statemachine.HistoryEntry
	Actor Actor `json:"actor"`
}

// HistoryEvent is one entry of a domain's history, as read back.
type HistoryEvent struct {
	statemachine.HistoryEntry
	// Actor made the change.
	Actor Actor
	// Token is a grant's fencing token: the revision that recorded it,
	// which is the one that committed the grant.
	Token uint64
	// Revision is the etcd revision that recorded the entry.
	Revision int64
}

func (s *Store) historyPrefix(domain string) string { return s.prefix + "history/" + domain + "/" }

func (s *Store) historyKey(domain string, n uint64) string {
	return fmt.Sprintf("%s%020d", s.historyPrefix(domain), n)
}

// appendHistory returns the operations that add entries to a domain's
// history and drop the oldest beyond the store's limit, and the cursor after
// them.
func (s *Store) appendHistory(domain string, cursor historyCursor, entries []statemachine.HistoryEntry, by Actor) ([]clientv3.Op, historyCursor, error) {
	if len(entries) == 0 {
		return nil, cursor, nil
	}
	var ops []clientv3.Op
	for _, e := range entries {
		value, err := json.Marshal(historyRecord{Version: recordVersion, HistoryEntry: e, Actor: by})
		if err != nil {
			return nil, cursor, fmt.Errorf("encode history of domain %q: %w", domain, err)
		}
		ops = append(ops, clientv3.OpPut(s.historyKey(domain, cursor.Next), string(value)))
		cursor.Next++
	}
	if kept := cursor.Next - cursor.First; kept > s.historyLimit {
		first := cursor.Next - s.historyLimit
		ops = append(ops, clientv3.OpDelete(s.historyKey(domain, cursor.First), clientv3.WithRange(s.historyKey(domain, first))))
		cursor.First = first
	}
	return ops, cursor, nil
}

// History reads a (normalized) domain's history, oldest first: the entries
// at or after since (all of them for the zero time), at most the newest
// limit of them (all for 0).
func (s *Store) History(ctx context.Context, domain string, since time.Time, limit int) ([]HistoryEvent, error) {
	resp, err := s.client.Get(ctx, s.historyPrefix(domain), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, fmt.Errorf("read history of domain %q: %w", domain, err)
	}
	from := statemachine.At(since)
	events := make([]HistoryEvent, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var r historyRecord
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			return nil, fmt.Errorf("decode history entry %s: %w", kv.Key, err)
		}
		if r.Version != recordVersion {
			return nil, fmt.Errorf("history entry %s has version %d; this authority reads version %d", kv.Key, r.Version, recordVersion)
		}
		if !since.IsZero() && r.At < from {
			continue
		}
		ev := HistoryEvent{HistoryEntry: r.HistoryEntry, Actor: r.Actor, Revision: kv.ModRevision}
		if r.Kind == statemachine.HistoryGranted {
			ev.Token = uint64(kv.ModRevision)
		}
		events = append(events, ev)
	}
	if limit > 0 && len(events) > limit {
		events = events[len(events)-limit:]
	}
	return events, nil
}

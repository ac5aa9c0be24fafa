package store

import (
	"encoding/json"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/fencegate/fencegate/authority/statemachine"
)

// Each domain has two keys under <prefix>fences/<domain>/:
//
//	state  the fence state (record), written by every call that changes it
//	grant  the current holder's grant, written only when the fence changes
//	       hands, so its mod revision is the holder's fencing token
const (
	stateSuffix = "state"
	grantSuffix = "grant"
)

// record is the stored JSON of a domain's state. Times are Unix nanoseconds.
// Version 1 gained the holder's per-instance leases ("instances") without a
// new version: the holder's summary fields keep their meaning, and a record
// without instances is read as one lease of instance "".
type record struct {
	Version int `json:"version"`
	statemachine.State
	// Actor made the change this record holds.
	Actor *Actor `json:"actor,omitempty"`
	// History locates the domain's history entries.
	History historyCursor `json:"history,omitzero"`
}

// grantRecord is the stored JSON of a grant; its mod revision is the token.
type grantRecord struct {
	Version   int                   `json:"version"`
	Name      string                `json:"name"`
	UID       string                `json:"uid"`
	Epoch     uint64                `json:"epoch"`
	GrantedAt statemachine.UnixNano `json:"granted_at_ns"`
}

func (s *Store) domainPrefix(domain string) string { return s.prefix + "fences/" + domain + "/" }
func (s *Store) stateKey(domain string) string     { return s.domainPrefix(domain) + stateSuffix }
func (s *Store) grantKey(domain string) string     { return s.domainPrefix(domain) + grantSuffix }

// decode builds a snapshot from the keys of one domain read at one revision.
func (s *Store) decode(domain string, kvs []*mvccpb.KeyValue) (Snapshot, error) {
	snap := Snapshot{Domain: domain}
	var grant *mvccpb.KeyValue
	stateKey, grantKey := s.stateKey(domain), s.grantKey(domain)
	for _, kv := range kvs {
		switch string(kv.Key) {
		case stateKey:
			var r record
			if err := json.Unmarshal(kv.Value, &r); err != nil {
				return Snapshot{}, fmt.Errorf("decode fence record %s: %w", kv.Key, err)
			}
			if r.Version != recordVersion {
				return Snapshot{}, fmt.Errorf("fence record %s has version %d; this authority reads version %d", kv.Key, r.Version, recordVersion)
			}
			// A record written before instances had leases of their
			// own reads as one lease of instance "".
			r.Holder.Upgrade()
			snap.State, snap.Revision, snap.Actor, snap.history = r.State, kv.ModRevision, r.Actor, r.History
		case grantKey:
			grant = kv
		}
	}
	return snap, s.attachToken(&snap, grant)
}

// attachToken fills in the holder's token from its grant key, after
// checking that the grant is the holder's.
func (s *Store) attachToken(snap *Snapshot, grant *mvccpb.KeyValue) error {
	h := snap.State.Holder
	if h == nil {
		return nil
	}
	if grant == nil {
		return fmt.Errorf("fence record of domain %q has a holder but no grant key %s", snap.Domain, s.grantKey(snap.Domain))
	}
	var g grantRecord
	if err := json.Unmarshal(grant.Value, &g); err != nil {
		return fmt.Errorf("decode grant %s: %w", grant.Key, err)
	}
	if g.UID != h.UID || g.GrantedAt != h.AcquiredAt {
		return fmt.Errorf("grant %s (cluster uid %q granted at %d) does not match the holder in the fence record (uid %q acquired at %d)",
			grant.Key, g.UID, g.GrantedAt, h.UID, h.AcquiredAt)
	}
	h.Token = uint64(grant.ModRevision)
	return nil
}

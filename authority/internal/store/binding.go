package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate/authority/statemachine"
)

// Each cluster UID that declared in any domain has a key
// <prefix>clusters/<uid> naming the cluster it is bound to. The domains'
// records are what binds a UID (each one's clusters, by UID); the key is
// what makes a UID's first declaration in a domain see the others': every
// declaration that adds the UID to a domain's record writes the key in the
// same transaction, on the condition that it did not change since it was
// read, so that two first declarations of one UID under two names, in two
// domains at once, cannot both succeed. When the key names the declared
// name the declaration joins at once; otherwise (no key yet: a new UID, or
// one recorded before the keys existed; or a key that names another
// cluster, which ForgetCluster in every domain may have made stale) the
// store reads every domain's record and statemachine.CheckBinding decides.
// ForgetCluster leaves the key alone: the next declaration that disagrees
// with it reads the domains' records again.

// bindingRecord is the stored JSON of a UID's binding.
type bindingRecord struct {
	Version int    `json:"version"`
	Name    string `json:"name"`
}

func (s *Store) bindingKey(uid string) string { return s.prefix + "clusters/" + uid }

// binding is what a declaration that adds its UID to a domain's record
// must check and write.
type binding struct {
	// refusal refuses the declaration, if the UID is bound to another
	// name in another domain.
	refusal error
	// cmp and put write the binding on the condition that it did not
	// change since it was read.
	cmp clientv3.Cmp
	put clientv3.Op
}

// readBinding reads what binds id's UID: its binding key, and every
// domain's record when the key is missing or names another cluster.
func (s *Store) readBinding(ctx context.Context, id statemachine.Identity) (binding, error) {
	key := s.bindingKey(id.UID)
	resp, err := s.client.Get(ctx, key)
	if err != nil {
		return binding{}, fmt.Errorf("read the binding of cluster uid %q: %w", id.UID, err)
	}
	var rev int64
	bound := ""
	if len(resp.Kvs) > 0 {
		kv := resp.Kvs[0]
		var r bindingRecord
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			return binding{}, fmt.Errorf("decode cluster binding %s: %w", kv.Key, err)
		}
		rev, bound = kv.ModRevision, r.Name
	}
	value, err := json.Marshal(bindingRecord{Version: recordVersion, Name: id.Name})
	if err != nil {
		return binding{}, fmt.Errorf("encode the binding of cluster uid %q: %w", id.UID, err)
	}
	b := binding{cmp: clientv3.Compare(clientv3.ModRevision(key), "=", rev), put: clientv3.OpPut(key, string(value))}
	if bound == id.Name {
		return b, nil
	}
	recorded, err := s.recordedNames(ctx, id.UID)
	if err != nil {
		return binding{}, err
	}
	b.refusal = statemachine.CheckBinding(id, recorded)
	return b, nil
}

// recordedNames reads every domain's record and returns the name each one
// that knows uid records it under, by domain.
func (s *Store) recordedNames(ctx context.Context, uid string) (map[string]string, error) {
	prefix := s.prefix + "fences/"
	resp, err := s.client.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read the fences of every domain for cluster uid %q: %w", uid, err)
	}
	recorded := map[string]string{}
	for _, kv := range resp.Kvs {
		domain, ok := strings.CutSuffix(strings.TrimPrefix(string(kv.Key), prefix), "/"+stateSuffix)
		if !ok {
			continue
		}
		// Only the clusters matter: the rest of the record is read with
		// the domain's own calls.
		var r struct {
			Clusters map[string]struct {
				Name string `json:"name"`
			} `json:"clusters"`
		}
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			return nil, fmt.Errorf("decode fence record %s: %w", kv.Key, err)
		}
		if c, ok := r.Clusters[uid]; ok {
			recorded[domain] = c.Name
		}
	}
	return recorded, nil
}

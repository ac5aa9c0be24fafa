package gate

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/fencegate/fencegate/domain"
)

// tombstoneTTL is how long the domain label of a deleted object is kept
// for the reconciles of its deletion.
const tombstoneTTL = 10 * time.Minute

// tombstones keeps the domain labels of the objects of one kind that the
// cache saw deleted: the reconcile of a deletion finds the object gone,
// and must judge it by its own domain, not by its namespace's.
type tombstones struct {
	clock clock.PassiveClock
	mu    sync.Mutex
	byKey map[types.NamespacedName]tombstone
	// pruned is when entries past tombstoneTTL were last dropped.
	pruned time.Time
}

type tombstone struct {
	label string
	at    time.Time
}

func newTombstones(c clock.PassiveClock) *tombstones {
	return &tombstones{clock: c, byKey: map[types.NamespacedName]tombstone{}}
}

// deleted is the informer's delete handler.
func (t *tombstones) deleted(obj any) {
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	key := types.NamespacedName{Namespace: m.GetNamespace(), Name: m.GetName()}
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if now.Sub(t.pruned) > tombstoneTTL/10 {
		for k, e := range t.byKey {
			if now.Sub(e.at) > tombstoneTTL {
				delete(t.byKey, k)
			}
		}
		t.pruned = now
	}
	label := m.GetLabels()[domain.Label]
	if label == "" {
		// Its namespace's domain, which is what an unknown object gets.
		delete(t.byKey, key)
		return
	}
	t.byKey[key] = tombstone{label: label, at: now}
}

// label is the domain label the object at key had when it was deleted; ""
// when it had none or its deletion was not seen.
func (t *tombstones) label(key types.NamespacedName) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byKey[key].label
}

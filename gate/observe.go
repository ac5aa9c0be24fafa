package gate

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// keptVersions bounds the versions of one Lease whose observation is kept:
// the cache may queue a few versions between dating one and storing it.
const keptVersions = 8

// observations dates, on the Gate's own clock, when the Leases cache first
// took each version of each Lease: the moment from which the time a hold
// had left is counted (holdEnd).
type observations struct {
	clock clock.PassiveClock
	mu    sync.Mutex
	// seen is, per Lease (namespace/name), its latest versions in the
	// order they came.
	seen map[string][]observation
}

type observation struct {
	resourceVersion string
	at              time.Time
}

func newObservations(c clock.PassiveClock) *observations {
	return &observations{clock: c, seen: map[string][]observation{}}
}

// transform is the Leases cache's transform: it runs before the cache
// stores an object, so the date is never later than what a read of the
// cache could see.
func (o *observations) transform(obj any) (any, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		// A tombstone: nothing to date, and nothing wrong.
		return obj, nil
	}
	key := m.GetNamespace() + "/" + m.GetName()
	now := o.clock.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	versions := o.seen[key]
	for _, v := range versions {
		if v.resourceVersion == m.GetResourceVersion() {
			// A relist of a version already seen: first seen earlier.
			return obj, nil
		}
	}
	versions = append(versions, observation{m.GetResourceVersion(), now})
	if len(versions) > keptVersions {
		versions = versions[len(versions)-keptVersions:]
	}
	o.seen[key] = versions
	return obj, nil
}

// at is when the Lease's version was first seen; the zero time when that
// is not known, which proves no hold.
func (o *observations) at(obj metav1.Object) time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, v := range o.seen[obj.GetNamespace()+"/"+obj.GetName()] {
		if v.resourceVersion == obj.GetResourceVersion() {
			return v.at
		}
	}
	return time.Time{}
}

// forget drops a deleted Lease's dates.
func (o *observations) forget(obj any) {
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.seen, m.GetNamespace()+"/"+m.GetName())
}

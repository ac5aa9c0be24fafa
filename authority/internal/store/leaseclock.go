package store

import (
	"maps"
	"time"

	"github.com/fencegate/fencegate/authority/statemachine"
)

// leaseClock is one replica's judgement of when the leases of a domain end:
// TTL after the replica first saw each one, on its own monotonic clock.
//
// The stored ExpiresAt of a lease is the wall clock of the replica that
// wrote it. Another replica whose wall clock runs ahead, or one whose
// clock is stepped forward, would read it as ended early and grant the
// fence while the holder's instances still act on it. A replica sees a
// lease no earlier than its instance sent the declaration that got it,
// and the instance's own validity runs from that send on its monotonic
// clock, shortened by its margin: so as long as the replicas' and the
// instances' monotonic clocks run at rates within margin/TTL of each
// other, every replica judges a lease ended only after its instance
// stopped acting on it. A replica that restarts, or first reads the domain
// late, counts the whole TTL again from then: the fence may move later,
// never earlier.
type leaseClock map[leaseKey]time.Duration

// leaseKey names one grant or renewal of an instance's lease: a renewal is
// a new lease. ExpiresAt tells apart the leases of records written before
// leases were numbered.
type leaseKey struct {
	uid, instance string
	seq           uint64
	expiresAt     statemachine.UnixNano
}

func keyOf(h *statemachine.Holder, instance string, l statemachine.Lease) leaseKey {
	return leaseKey{uid: h.UID, instance: instance, seq: l.Seq, expiresAt: l.ExpiresAt}
}

// judge returns s with each lease's LocalEnd set to when this replica
// judges it ends, on the scale of now: the machine compares it with now.
// A lease seen for the first time is counted from mono.
func (c *leaseClock) judge(s statemachine.State, now time.Time, mono time.Duration, defaultTTL time.Duration) statemachine.State {
	h := s.Holder
	if h == nil || len(h.Instances) == 0 {
		return s
	}
	if *c == nil {
		*c = leaseClock{}
	}
	// Only the leases change: the rest is shared with s, which no step
	// changes (each clones what it changes).
	judged := *h
	judged.Instances = maps.Clone(h.Instances)
	h, s.Holder = &judged, &judged
	for name, l := range h.Instances {
		key := keyOf(h, name, l)
		first, seen := (*c)[key]
		if !seen {
			first = mono
			(*c)[key] = mono
		}
		ttl := l.TTL
		if ttl <= 0 {
			ttl = defaultTTL
		}
		l.LocalEnd = statemachine.At(now).Add(first + ttl - mono)
		h.Instances[name] = l
	}
	return s
}

// remember records the leases of next, the state a step made, that this
// replica has not seen (those the step wrote) as first seen at mono, and
// forgets the leases next no longer has, so the clock never holds more
// than one domain's leases.
func (c *leaseClock) remember(next statemachine.State, mono time.Duration) {
	kept := leaseClock{}
	if h := next.Holder; h != nil {
		for name, l := range h.Instances {
			key := keyOf(h, name, l)
			first, seen := (*c)[key]
			if !seen {
				first = mono
			}
			kept[key] = first
		}
	}
	*c = kept
}

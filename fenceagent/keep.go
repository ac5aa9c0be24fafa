package fenceagent

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/fencegate/fencegate/fencestate"
)

// KeepsLease reports whether an instance that declares at least every
// interval asks the authority to keep its running lease, of length ttl and
// got age ago, instead of renewing it: while the lease still has two
// thirds of its usable part (ttl − margin) left at the next declaration.
// That is what renewing at every declaration leaves when the agent
// declares a third of the usable part apart, as it does by default (see
// renewInterval): so a cluster that declares more often than that, for a
// quicker answer to a failover, does not write a new lease with each
// heartbeat, and rides out as long an outage of the authority.
func KeepsLease(age, interval, ttl, margin time.Duration) bool {
	usable := ttl - margin
	return usable > 0 && age >= 0 && age+interval <= usable/3
}

// heldLease is the lease this instance acts on: the declaration that got
// it, and that declaration's send, from which the instance counts it.
type heldLease struct {
	// id is the declaration_id of the declaration that got it; 0: none
	// held.
	id    uint64
	sent  time.Time
	ttl   time.Duration
	epoch uint64
}

// newDeclarationID names one declaration: random, so that an answer never
// matches a declaration of another process of the same instance name (a
// restarted container), and never 0, which names none.
func newDeclarationID() uint64 {
	for {
		if id := rand.Uint64(); id != 0 {
			return id
		}
	}
}

// leaseFrom says which of this instance's declarations got the lease that
// a grants, and so from whose send the lease counts: r's own, or the one
// whose lease r asked to keep. An authority that names neither answers
// with a lease this instance cannot count, which is no grant to act on.
func (r result) leaseFrom(a answer) answer {
	if a.kind != granted {
		return a
	}
	switch a.leaseID {
	case 0, r.id:
		// 0: an authority that names no declaration renews every lease.
		a.leaseSent = r.sent
	case r.kept.id:
		a.leaseSent = r.kept.sent
	default:
		return answer{kind: unexpected, reason: fencestate.ReasonUnexpectedError, err: fmt.Errorf(
			"the fence authority answered with the lease of declaration %d, which is neither this declaration (%d) nor the one whose lease it asked to keep (%d)",
			a.leaseID, r.id, r.kept.id)}
	}
	return a
}

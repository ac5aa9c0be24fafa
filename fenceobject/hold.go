package fenceobject

import (
	"context"
	"sync"
	"time"

	"github.com/fencegate/fencegate/fenceobject/membership"
	"github.com/fencegate/fencegate/fencestate"
)

// memberLease is this instance's membership Lease and the hold it
// publishes. The instance renews it and publishes the hold from the fence
// state; the agent withdraws the hold before it gives its lease up
// (WithdrawHold), from its own goroutine: the mutex orders the two, so
// that a hold read from a state the agent has since left is never written
// after the withdrawal.
type memberLease struct {
	mu    sync.Mutex
	lease *membership.Lease
	// hold is the hold the Lease carries as last written.
	hold membership.Hold
	// unsure is set when the last write of a hold failed: the API server
	// may have taken it all the same (an answer lost), and the Lease's
	// renewals write the hold last asked for, so the Lease may carry
	// either hold until a write of the hold is known to be taken.
	unsure bool
}

// renew makes or renews the Lease, with the hold it carries.
func (m *memberLease) renew(ctx context.Context) (made bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lease.Renew(ctx)
}

// publish writes the hold that source's state gives, unless the Lease
// carries it already or, for a renewed hold of the same token, before
// refreshAt. It returns the hold the Lease carries.
func (m *memberLease) publish(ctx context.Context, source fencestate.Source, now, refreshAt time.Time) (membership.Hold, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	want := holdOf(source)
	switch {
	case m.unsure:
	case want.Token == m.hold.Token && want.ValidUntil.Equal(m.hold.ValidUntil):
		return m.hold, nil
	case want.Token != 0 && want.Token == m.hold.Token && now.Before(refreshAt):
		return m.hold, nil
	}
	return m.set(ctx, want)
}

// set writes hold h, and notes whether the Lease is known to carry it.
func (m *memberLease) set(ctx context.Context, h membership.Hold) (membership.Hold, error) {
	if err := m.lease.SetHold(ctx, h); err != nil {
		m.unsure = true
		return m.hold, err
	}
	m.hold, m.unsure = h, false
	return h, nil
}

// withdraw removes the hold from the Lease unless the Lease is known to
// carry none: after a failed write it may carry one, so it writes.
func (m *memberLease) withdraw(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.hold.Token == 0 && !m.unsure {
		return nil
	}
	_, err := m.set(ctx, membership.Hold{})
	return err
}

// release deletes the Lease, and the hold with it.
func (m *memberLease) release(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.lease.Release(ctx); err != nil {
		return err
	}
	m.hold = membership.Hold{}
	return nil
}

// holdOf is the hold of source's state: its token and the end of its
// validity while it is active, none otherwise.
func holdOf(source fencestate.Source) membership.Hold {
	s, ok := source.Fence()
	if !ok || s.Status != fencestate.Active || s.ValidUntilNS <= 0 {
		return membership.Hold{}
	}
	return membership.Hold{Token: int64(s.Token), ValidUntil: time.Unix(0, s.ValidUntilNS)}
}

// WithdrawHold removes the hold this instance's Lease publishes, so that
// package gate no longer sees this cluster hold the fence. The fence agent
// calls it before it gives its lease up (fenceagent.Options.BeforeRelease):
// once the authority may hand the fence to another cluster, the API server
// has taken the withdrawal.
func (k *Keeper) WithdrawHold(ctx context.Context) error {
	return k.member.withdraw(ctx)
}

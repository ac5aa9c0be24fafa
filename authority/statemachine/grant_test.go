package statemachine

import (
	"testing"
	"time"
)

// grantStep is one request of TestHolderGrantKind at a time after t0, and
// the grant kind the holder must carry afterwards.
type grantStep struct {
	at      time.Duration
	declare *Declaration
	release *Release
	revoke  *Revocation

	// wantOutcome is the declaration's outcome; 0 for a release or
	// revocation, which must succeed.
	wantOutcome Outcome
	wantHolder  Identity
	wantGrant   GrantKind
}

func grantDeclare(at time.Duration, d Declaration, want Outcome, holder Identity, grant GrantKind) grantStep {
	return grantStep{at: at, declare: &d, wantOutcome: want, wantHolder: holder, wantGrant: grant}
}

func grantRelease(at time.Duration, r Release, holder Identity, grant GrantKind) grantStep {
	return grantStep{at: at, release: &r, wantHolder: holder, wantGrant: grant}
}

func grantRevoke(at time.Duration, r Revocation, holder Identity, grant GrantKind) grantStep {
	return grantStep{at: at, revoke: &r, wantHolder: holder, wantGrant: grant}
}

// TestHolderGrantKind: a grant records in the holder how it came about,
// the kind its answer gives, so that every later answer (a renewal's, a
// GetFence) tells the new holder whether the previous one released or was
// cut off; renewals, new instances, raised epochs, revocations and
// releases of the holder keep it. Keyed by the cases of Declare.
func TestHolderGrantKind(t *testing.T) {
	machine := Machine{LeaseTTL: ttl}
	legacy := holding(east, 3, 0) // stored before grant kinds were recorded
	tests := map[string]struct {
		state State
		steps []grantStep
	}{
		"3: a first grant records first; renewals, new instances and a raised epoch keep it": {
			steps: []grantStep{
				grantDeclare(0, declare(east, 1), Granted, east, GrantFirst),
				grantDeclare(5*time.Second, declare(east, 1), Renewed, east, GrantFirst),
				grantDeclare(6*time.Second, declareAs(east, 1, "pod-b"), Renewed, east, GrantFirst),
				grantDeclare(7*time.Second, declareAs(east, 2, "pod-b"), Renewed, east, GrantFirst),
				grantDeclare(8*time.Second, declare(west, 1), Fenced, east, GrantFirst),
			},
		},
		"4: a revocation and releases of the holder keep its kind": {
			steps: []grantStep{
				grantDeclare(0, declare(east, 1), Granted, east, GrantFirst),
				grantDeclare(time.Second, declareAs(east, 1, "pod-b"), Renewed, east, GrantFirst),
				grantRevoke(2*time.Second, Revocation{ClusterName: "east", Instance: "pod-b"}, east, GrantFirst),
				grantRelease(3*time.Second, Release{ClusterUID: east.UID, Epoch: 1}, east, GrantFirst),
				grantDeclare(4*time.Second, declare(east, 1), Renewed, east, GrantFirst),
			},
		},
		"4: a holder stored before kinds were recorded keeps none across renewals": {
			state: State{Holder: legacy, Clusters: seen(map[Identity]uint64{east: 3})},
			steps: []grantStep{
				grantDeclare(time.Second, declare(east, 3), Renewed, east, ""),
				grantDeclare(2*time.Second, declareAs(east, 3, "pod-b"), Renewed, east, ""),
			},
		},
		"6: a grant after every instance released records after_release, and renewals keep it": {
			steps: []grantStep{
				grantDeclare(0, declare(east, 1), Granted, east, GrantFirst),
				grantDeclare(time.Second, declareAs(east, 1, "pod-b"), Renewed, east, GrantFirst),
				grantDeclare(2*time.Second, declare(west, 2), Acquiring, east, GrantFirst),
				grantRelease(3*time.Second, Release{ClusterUID: east.UID, Epoch: 1}, east, GrantFirst),
				grantRelease(3*time.Second, Release{ClusterUID: east.UID, Epoch: 1, Instance: "pod-b"}, east, GrantFirst),
				grantDeclare(4*time.Second, declare(west, 2), Granted, west, GrantAfterRelease),
				grantDeclare(10*time.Second, declare(west, 2), Renewed, west, GrantAfterRelease),
				grantDeclare(11*time.Second, declare(west, 3), Renewed, west, GrantAfterRelease),
			},
		},
		"6: a grant after the holder's lease ended records after_expiry, and renewals keep it": {
			steps: []grantStep{
				grantDeclare(0, declare(east, 1), Granted, east, GrantFirst),
				grantDeclare(time.Second, declare(west, 2), Acquiring, east, GrantFirst),
				grantDeclare(ttl, declare(west, 2), Granted, west, GrantAfterExpiry),
				grantDeclare(ttl+time.Second, declare(west, 2), Renewed, west, GrantAfterExpiry),
				grantDeclare(ttl+2*time.Second, declareAs(west, 2, "pod-b"), Renewed, west, GrantAfterExpiry),
			},
		},
		"6: one instance released, the other's lease ended: after_expiry": {
			steps: []grantStep{
				grantDeclare(0, declare(east, 1), Granted, east, GrantFirst),
				grantDeclare(0, declareAs(east, 1, "pod-b"), Renewed, east, GrantFirst),
				grantRelease(time.Second, Release{ClusterUID: east.UID, Epoch: 1}, east, GrantFirst),
				grantDeclare(2*time.Second, declare(west, 2), Acquiring, east, GrantFirst),
				grantDeclare(ttl, declare(west, 2), Granted, west, GrantAfterExpiry),
			},
		},
		"6: a grant after expiry replaces the previous holder's kind, even after_release": {
			steps: []grantStep{
				grantDeclare(0, declare(east, 1), Granted, east, GrantFirst),
				grantRelease(time.Second, Release{ClusterUID: east.UID, Epoch: 1}, east, GrantFirst),
				grantDeclare(2*time.Second, declare(west, 2), Granted, west, GrantAfterRelease),
				grantDeclare(3*time.Second, declare(east, 3), Acquiring, west, GrantAfterRelease),
				grantDeclare(2*time.Second+ttl, declare(east, 3), Granted, east, GrantAfterExpiry),
			},
		},
		"6: a copy's takeover after the lease ended records after_expiry": {
			state: State{
				Holder: grantedAt(east, 3, 0, GrantFirst),
				Clusters: map[string]Cluster{east.UID: {
					Name: east.Name, HighestEpoch: 3, LastEpoch: 3, Generation: 5, PreviousGeneration: 4, PresentsGeneration: true,
				}},
				LastGeneration: 5,
			},
			steps: []grantStep{
				grantDeclare(ttl, Declaration{Cluster: east, Epoch: 4, Generation: 2}, Granted, east, GrantAfterExpiry),
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := tc.state
			for i, st := range tc.steps {
				now := t0.Add(st.at)
				switch {
				case st.declare != nil:
					r, err := machine.Declare(s, *st.declare, now)
					if err != nil {
						t.Fatalf("step %d: declare: %v", i, err)
					}
					if r.Answer.Outcome != st.wantOutcome {
						t.Fatalf("step %d: outcome %v, want %v", i, r.Answer.Outcome, st.wantOutcome)
					}
					if r.Answer.Outcome == Granted && r.Answer.Grant != st.wantGrant {
						t.Fatalf("step %d: answer's grant %q, want %q", i, r.Answer.Grant, st.wantGrant)
					}
					s = r.State
				case st.release != nil:
					r, err := machine.Release(s, *st.release, now)
					if err != nil || r.Outcome != Released {
						t.Fatalf("step %d: release: %v, %v; want released", i, r.Outcome, err)
					}
					s = r.State
				default:
					r, err := machine.Revoke(s, *st.revoke, now)
					if err != nil || r.Outcome != Revoked {
						t.Fatalf("step %d: revoke: %v, %v; want revoked", i, r.Outcome, err)
					}
					s = r.State
				}
				h := s.Holder
				if h == nil || !h.Is(st.wantHolder) || h.Grant != st.wantGrant {
					t.Fatalf("step %d: holder %+v, want %s granted %q", i, h, st.wantHolder.Name, st.wantGrant)
				}
			}
		})
	}
}

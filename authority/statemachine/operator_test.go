package statemachine

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// revokedLease is lease, revoked by the operator "oncall".
func revokedLease(epoch uint64, renewedAt time.Duration) Lease {
	l := lease(epoch, renewedAt)
	l.Revoked, l.RevokedBy = true, "oncall"
	return l
}

func TestRevoke(t *testing.T) {
	machine := Machine{LeaseTTL: ttl}
	twoPods := func() *Holder {
		return instances(&Holder{Identity: east, Epoch: 3, AcquiredAt: at(0), Token: 10},
			map[string]Lease{"a": lease(3, 0), "b": lease(3, 2*time.Second)})
	}
	tests := map[string]struct {
		holder *Holder
		req    Revocation
		now    time.Duration

		want        RevokeOutcome
		wantLeases  map[string]Lease
		wantRevoked bool
		wantUntil   UnixNano
		wantEvents  []EventType
		wantHistory []HistoryKind
	}{
		"every lease of the holder": {
			holder: twoPods(), req: Revocation{ClusterName: "east", AllInstances: true, By: "oncall"}, now: time.Second,
			want: Revoked, wantLeases: map[string]Lease{"a": revokedLease(3, 0), "b": revokedLease(3, 2*time.Second)}, wantRevoked: true,
			wantUntil: at(2*time.Second + ttl), wantEvents: []EventType{HolderRevoked}, wantHistory: []HistoryKind{HistoryRevoked},
		},
		"one instance": {
			holder: twoPods(), req: Revocation{ClusterName: "east", Instance: "a", By: "oncall"}, now: time.Second,
			want: Revoked, wantLeases: map[string]Lease{"a": revokedLease(3, 0), "b": lease(3, 2*time.Second)},
			wantUntil: at(2*time.Second + ttl), wantEvents: []EventType{HolderRevoked}, wantHistory: []HistoryKind{HistoryRevoked},
		},
		"an instance without a lease": {
			holder: twoPods(), req: Revocation{ClusterName: "east", Instance: "gone", By: "oncall"}, now: time.Second,
			want: RevokeNoLease, wantLeases: map[string]Lease{"a": lease(3, 0), "b": lease(3, 2*time.Second)}, wantUntil: at(2*time.Second + ttl),
		},
		"a lease that ended is dropped and recorded, not revoked": {
			holder: twoPods(), req: Revocation{ClusterName: "east", Instance: "a", By: "oncall"}, now: ttl + time.Second,
			want: RevokeNoLease, wantLeases: map[string]Lease{"b": lease(3, 2*time.Second)}, wantUntil: at(2*time.Second + ttl),
			wantHistory: []HistoryKind{HistoryLeaseExpired},
		},
		"again: nothing changes": {
			holder: instances(&Holder{Identity: east, Epoch: 3, AcquiredAt: at(0), Token: 10, Revoked: true, RevokedEpoch: 3, RevokedBy: "oncall"},
				map[string]Lease{"a": revokedLease(3, 0)}),
			req: Revocation{ClusterName: "east", AllInstances: true, By: "oncall"}, now: time.Second,
			want: AlreadyRevoked, wantLeases: map[string]Lease{"a": revokedLease(3, 0)}, wantRevoked: true, wantUntil: at(ttl),
		},
		"another cluster": {
			holder: twoPods(), req: Revocation{ClusterName: "west", AllInstances: true}, now: time.Second,
			want: RevokeNotHolder, wantLeases: map[string]Lease{"a": lease(3, 0), "b": lease(3, 2*time.Second)},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := State{Holder: tc.holder}
			r, err := machine.Revoke(s, tc.req, t0.Add(tc.now))
			if err != nil {
				t.Fatal(err)
			}
			if r.Outcome != tc.want {
				t.Errorf("outcome %s, want %s", r.Outcome, tc.want)
			}
			h := r.State.Holder
			if diff := cmp.Diff(tc.wantLeases, h.Instances, bookkeeping); diff != "" {
				t.Errorf("leases (-want +got):\n%s", diff)
			}
			if h.Revoked != tc.wantRevoked || r.Until != tc.wantUntil {
				t.Errorf("revoked %v until %d, want %v until %d", h.Revoked, r.Until, tc.wantRevoked, tc.wantUntil)
			}
			if diff := cmp.Diff(tc.wantEvents, r.Events); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			var kinds []HistoryKind
			for _, e := range r.History {
				kinds = append(kinds, e.Kind)
			}
			if diff := cmp.Diff(tc.wantHistory, kinds); diff != "" {
				t.Errorf("history (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDeclareAfterRevoke: the revoked leases are not renewed, nor granted to
// new instances of a revoked cluster; a higher epoch lifts the revocation;
// another cluster is granted only once the revoked leases ended.
func TestDeclareAfterRevoke(t *testing.T) {
	machine := Machine{LeaseTTL: ttl}
	revokedEast := func() State {
		return State{
			Holder: instances(&Holder{Identity: east, Epoch: 3, AcquiredAt: at(0), Token: 10, Revoked: true, RevokedEpoch: 3, RevokedBy: "oncall"},
				map[string]Lease{"a": revokedLease(3, 0)}),
			Clusters: seen(map[Identity]uint64{east: 3}),
		}
	}
	tests := map[string]struct {
		decl Declaration
		now  time.Duration
		want Answer
	}{
		"the revoked instance":                        {decl: declareAs(east, 3, "a"), now: time.Second, want: Answer{Outcome: Fenced, FenceReason: LeaseRevoked, HighestEpoch: 3}},
		"a new instance of the revoked cluster":       {decl: declareAs(east, 3, "c"), now: time.Second, want: Answer{Outcome: Fenced, FenceReason: LeaseRevoked, HighestEpoch: 3}},
		"a higher epoch: the operator's new decision": {decl: declareAs(east, 4, "a"), now: time.Second, want: Answer{Outcome: Renewed, HighestEpoch: 3}},
		"west before the lease ended":                 {decl: declare(west, 4), now: ttl - time.Millisecond, want: Answer{Outcome: Acquiring, RetryAfter: time.Millisecond}},
		"west once it ended":                          {decl: declare(west, 4), now: ttl, want: Answer{Outcome: Granted, Grant: GrantAfterExpiry}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := revokedEast()
			r, err := machine.Declare(s, tc.decl, t0.Add(tc.now))
			if err != nil {
				t.Fatal(err)
			}
			r.Answer.Previous = nil
			if diff := cmp.Diff(tc.want, r.Answer, bookkeeping); diff != "" {
				t.Errorf("answer (-want +got):\n%s", diff)
			}
			if tc.want.Outcome == Renewed && (r.State.Holder.Revoked || r.State.Holder.Instances["a"].Revoked) {
				t.Errorf("a higher epoch left the revocation: %+v", r.State.Holder)
			}
			if tc.want.Outcome == Fenced && !cmp.Equal(r.State.Holder, s.Holder) {
				t.Errorf("a fenced declaration changed the holder: %+v", r.State.Holder)
			}
		})
	}
}

func TestEpochStep(t *testing.T) {
	s := State{Clusters: seen(map[Identity]uint64{east: 5, west: 3})}
	tests := map[string]struct {
		machine Machine
		epoch   uint64
		wantErr *EpochStepError
	}{
		"up to the step":               {machine: Machine{LeaseTTL: ttl, MaxEpochStep: 10}, epoch: 15},
		"one beyond":                   {machine: Machine{LeaseTTL: ttl, MaxEpochStep: 10}, epoch: 16, wantErr: &EpochStepError{Declared: 16, Highest: 5, MaxStep: 10}},
		"the default step":             {machine: Machine{LeaseTTL: ttl}, epoch: 1006, wantErr: &EpochStepError{Declared: 1006, Highest: 5, MaxStep: DefaultMaxEpochStep}},
		"the largest epoch":            {machine: Machine{LeaseTTL: ttl}, epoch: ^uint64(0), wantErr: &EpochStepError{Declared: ^uint64(0), Highest: 5, MaxStep: DefaultMaxEpochStep}},
		"below the highest is no step": {machine: Machine{LeaseTTL: ttl, MaxEpochStep: 1}, epoch: 4},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := tc.machine.Declare(s, declare(north, tc.epoch), t0)
			var stepErr *EpochStepError
			if tc.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.As(err, &stepErr) || *stepErr != *tc.wantErr {
				t.Fatalf("error %v, want %+v", err, tc.wantErr)
			}
		})
	}
}

func TestForget(t *testing.T) {
	s := State{
		Holder:   holding(east, 5, 0),
		Pending:  pendingAt(west, 6, 0),
		Clusters: seen(map[Identity]uint64{east: 5, west: 6, north: 9}),
	}
	tests := map[string]struct {
		cluster Identity
		want    ForgetOutcome
	}{
		"a cluster not in use":   {cluster: north, want: Forgotten},
		"the holder":             {cluster: east, want: ForgetInUse},
		"the pending takeover":   {cluster: west, want: ForgetInUse},
		"an unknown uid":         {cluster: Identity{Name: "south", UID: "uid-south"}, want: ForgetUnknown},
		"a uid under a new name": {cluster: Identity{Name: "nord", UID: north.UID}, want: ForgetUnknown},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r, err := Machine{LeaseTTL: ttl}.Forget(s, Forgetting{Cluster: tc.cluster}, t0)
			if err != nil {
				t.Fatal(err)
			}
			if r.Outcome != tc.want {
				t.Fatalf("outcome %s, want %s", r.Outcome, tc.want)
			}
			_, kept := r.State.Clusters[tc.cluster.UID]
			switch forgotten := tc.want == Forgotten; {
			case forgotten && (kept || len(r.History) != 1):
				t.Errorf("kept %v, history %v", kept, r.History)
			case !forgotten && (!cmp.Equal(r.State, s) || len(r.History) != 0):
				t.Errorf("a refused forget changed the state or the history: %+v, %v", r.State, r.History)
			}
			if tc.want == Forgotten && r.State.HighestEpoch() != 6 {
				t.Errorf("highest epoch after forgetting north = %d, want 6", r.State.HighestEpoch())
			}
		})
	}
}

// TestDeclareHistory: what a declaration records.
func TestDeclareHistory(t *testing.T) {
	machine := Machine{LeaseTTL: ttl}
	tests := map[string]struct {
		state State
		decl  Declaration
		now   time.Duration
		want  []HistoryEntry
	}{
		"the first grant": {
			decl: declareAs(east, 1, "a"),
			want: []HistoryEntry{{Kind: HistoryGranted, At: at(0), Cluster: east, Epoch: 1, Instance: "a", Grant: GrantFirst}},
		},
		"a renewal records nothing": {
			state: State{Holder: holding(east, 1, 0)}, decl: declare(east, 1), now: time.Second,
		},
		"a takeover becomes pending": {
			state: State{Holder: holding(east, 1, 0)}, decl: declare(west, 2), now: time.Second,
			want: []HistoryEntry{{Kind: HistoryPending, At: at(time.Second), Cluster: west, Epoch: 2}},
		},
		"the holder raises its epoch over the pending one": {
			state: State{Holder: holding(east, 1, 0), Pending: pendingAt(west, 2, 0)}, decl: declare(east, 3), now: time.Second,
			want: []HistoryEntry{{Kind: HistoryPendingDropped, At: at(time.Second), Cluster: west, Epoch: 2}},
		},
		"a grant after a lease end records the end, then the grant": {
			state: State{Holder: holding(east, 1, 0), Pending: pendingAt(west, 2, 0)}, decl: declare(west, 2), now: ttl,
			want: []HistoryEntry{
				{Kind: HistoryLeaseExpired, At: at(ttl), Cluster: east, Epoch: 1},
				{Kind: HistoryGranted, At: at(ttl), Cluster: west, Epoch: 2, Grant: GrantAfterExpiry, Previous: &HolderRef{Identity: east, Epoch: 1, Token: 10}},
			},
		},
		"another instance's lease ran out": {
			state: State{Holder: instances(&Holder{Identity: east, Epoch: 1, AcquiredAt: at(0), Token: 10}, map[string]Lease{"a": lease(1, 0), "b": lease(1, ttl)})},
			decl:  declareAs(east, 1, "b"), now: ttl + time.Second,
			want: []HistoryEntry{{Kind: HistoryLeaseExpired, At: at(ttl), Cluster: east, Epoch: 1, Instance: "a"}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r, err := machine.Declare(tc.state, tc.decl, t0.Add(tc.now))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, r.History); diff != "" {
				t.Errorf("history (-want +got):\n%s", diff)
			}
		})
	}
}

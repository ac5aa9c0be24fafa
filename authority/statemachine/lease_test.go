package statemachine

import (
	"fmt"
	"testing"
	"time"
)

// TestLeaseNumbers: every grant and renewal writes a lease with the next
// number of its domain and the TTL it was granted for, so that a replica of
// the authority tells a renewal from a lease it has seen without reading
// another replica's clock.
func TestLeaseNumbers(t *testing.T) {
	machine := Machine{LeaseTTL: ttl}
	s := State{}
	var seqs []uint64
	for i, d := range []Declaration{declareAs(east, 1, "a"), declareAs(east, 1, "b"), declareAs(east, 1, "a")} {
		r, err := machine.Declare(s, d, t0.Add(time.Duration(i)*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		s = r.State
		l := s.Holder.Instances[d.Instance]
		if l.TTL != ttl {
			t.Errorf("lease %+v: TTL %s, want %s", l, l.TTL, ttl)
		}
		seqs = append(seqs, l.Seq)
	}
	if fmt.Sprint(seqs) != "[1 2 3]" || s.LeaseSeq != 3 {
		t.Fatalf("lease numbers %v, domain at %d: want [1 2 3], 3", seqs, s.LeaseSeq)
	}
}

// TestLocalEnd: the machine judges a lease's end by LocalEnd, the end this
// replica of the authority counted on its own clock, not by the ExpiresAt
// another replica's wall clock wrote.
func TestLocalEnd(t *testing.T) {
	machine := Machine{LeaseTTL: ttl}
	tests := map[string]struct {
		localEnd time.Duration // after t0; 0 leaves it unset
		want     Outcome
	}{
		"without a local end, ExpiresAt counts":                        {want: Granted},
		"a later local end keeps the holder from being free":           {localEnd: 2 * ttl, want: Acquiring},
		"an earlier local end than ExpiresAt frees the holder earlier": {localEnd: ttl / 2, want: Granted},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			h := holding(east, 3, 0) // ExpiresAt t0+ttl
			if tc.localEnd != 0 {
				l := h.Instances[""]
				l.LocalEnd = at(tc.localEnd)
				h.Instances[""] = l
			}
			s := State{Holder: h, Clusters: seen(map[Identity]uint64{east: 3})}
			now := ttl + time.Second
			if tc.localEnd != 0 && tc.localEnd < ttl {
				now = tc.localEnd
			}
			r, err := machine.Declare(s, declare(west, 4), t0.Add(now))
			if err != nil {
				t.Fatal(err)
			}
			if r.Answer.Outcome != tc.want {
				t.Fatalf("west declaring at +%s: %s, want %s", now, r.Answer.Outcome, tc.want)
			}
		})
	}
}

// TestRevokedInstancesAreBounded: a revoked instance whose lease ended
// leaves the instances but is remembered, so it cannot renew at its
// revoked epoch; the machine remembers at most MaxInstances of them.
func TestRevokedInstancesAreBounded(t *testing.T) {
	machine := Machine{LeaseTTL: ttl}
	leases := manyLeases(MaxInstances+3, 3, 0)
	for name, l := range leases {
		l.Revoked = true
		leases[name] = l
	}
	h := instances(&Holder{Identity: east, Epoch: 3, AcquiredAt: at(0), Token: 10}, leases)
	s := State{Holder: h, Clusters: seen(map[Identity]uint64{east: 3})}
	r, err := machine.Declare(s, declareAs(east, 3, "fresh"), t0.Add(2*ttl))
	if err != nil {
		t.Fatal(err)
	}
	next := r.State.Holder
	if len(next.Instances) != 1 || len(next.RevokedInstances) != MaxInstances {
		t.Fatalf("%d instances and %d revoked ones remembered, want 1 and %d", len(next.Instances), len(next.RevokedInstances), MaxInstances)
	}
	for name := range next.RevokedInstances {
		again, err := machine.Declare(r.State, declareAs(east, 3, name), t0.Add(2*ttl+time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if again.Answer.Outcome != Fenced || again.Answer.FenceReason != LeaseRevoked {
			t.Fatalf("revoked instance %s declaring again at its epoch: %s, want fenced as revoked", name, again.Answer.Outcome)
		}
		raised, err := machine.Declare(r.State, declareAs(east, 4, name), t0.Add(2*ttl+time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if raised.Answer.Outcome != Renewed {
			t.Fatalf("revoked instance %s at a higher epoch: %s, want renewed", name, raised.Answer.Outcome)
		}
		if _, still := raised.State.Holder.RevokedInstances[name]; still {
			t.Fatalf("instance %s renewed at a higher epoch is still remembered as revoked", name)
		}
		break
	}
}

// TestHistoryPerChangeIsBounded: the largest step, a takeover once every
// instance of the holder let its lease run out, writes at most
// MaxHistoryPerChange entries.
func TestHistoryPerChangeIsBounded(t *testing.T) {
	machine := Machine{LeaseTTL: ttl}
	h := instances(&Holder{Identity: east, Epoch: 3, AcquiredAt: at(0), Token: 10}, manyLeases(MaxInstances, 3, 0))
	s := State{Holder: h, Pending: pendingAt(north, 4, 0), Clusters: seen(map[Identity]uint64{east: 3, north: 4})}
	r, err := machine.Declare(s, declare(west, 5), t0.Add(2*ttl))
	if err != nil {
		t.Fatal(err)
	}
	if r.Answer.Outcome != Granted || len(r.History) != MaxInstances+1 || len(r.History) > MaxHistoryPerChange {
		t.Fatalf("%s with %d history entries, want granted with %d (at most %d)", r.Answer.Outcome, len(r.History), MaxInstances+1, MaxHistoryPerChange)
	}
}

// TestKeptLease: a renewal that asks for the instance's running lease to be
// kept gets that lease unchanged, and changes nothing to store, only while
// the lease is the one the declaration names, at the declared epoch and
// neither released nor ended; otherwise it gets a new lease, stored with
// the declaration's ID.
func TestKeptLease(t *testing.T) {
	machine := Machine{LeaseTTL: ttl}
	running := Lease{Epoch: 3, ExpiresAt: at(ttl), Seq: 1, TTL: ttl, DeclarationID: 7}
	state := func(edit func(*Lease)) State {
		l := running
		if edit != nil {
			edit(&l)
		}
		s := State{Holder: instances(&Holder{Identity: east, Epoch: 3, AcquiredAt: at(0), Token: 10}, map[string]Lease{"": l}),
			Clusters: seen(map[Identity]uint64{east: 3}), LeaseSeq: 1, LastGeneration: 1}
		c := s.Clusters[east.UID]
		c.Generation, c.GenerationAt, c.PresentsGeneration = 1, at(0), true
		s.Clusters[east.UID] = c
		return s
	}
	tests := map[string]struct {
		state State
		keep  uint64
		epoch uint64
		now   time.Duration
		// wantKept: the answer's lease is the running one and nothing
		// changed; else it is a new one, of declaration 9.
		wantKept bool
	}{
		"the running lease, asked for":           {state: state(nil), keep: 7, epoch: 3, now: time.Second, wantKept: true},
		"a renewal asked for":                    {state: state(nil), keep: 0, epoch: 3, now: time.Second},
		"another declaration's lease":            {state: state(nil), keep: 8, epoch: 3, now: time.Second},
		"at a higher epoch":                      {state: state(nil), keep: 7, epoch: 4, now: time.Second},
		"a released lease":                       {state: state(func(l *Lease) { l.Released = true }), keep: 7, epoch: 3, now: time.Second},
		"a lease that ended":                     {state: state(nil), keep: 7, epoch: 3, now: ttl},
		"a lease stored without its declaration": {state: state(func(l *Lease) { l.DeclarationID = 0 }), keep: 7, epoch: 3, now: time.Second},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d := Declaration{Cluster: east, Epoch: tc.epoch, Generation: 1, ID: 9, KeepLeaseOf: tc.keep}
			r, err := machine.Declare(tc.state, d, t0.Add(tc.now))
			if err != nil {
				t.Fatal(err)
			}
			if r.Answer.Outcome != Renewed {
				t.Fatalf("outcome %s, want renewed", r.Answer.Outcome)
			}
			stored := r.State.Holder.Instances[""]
			if stored != r.Answer.Lease {
				t.Errorf("answered lease %+v, stored %+v", r.Answer.Lease, stored)
			}
			if tc.wantKept {
				if stored != tc.state.Holder.Instances[""] || r.Changed {
					t.Errorf("kept: lease %+v, changed %v; want the running lease %+v, unchanged", stored, r.Changed, running)
				}
				return
			}
			want := Lease{Epoch: tc.epoch, ExpiresAt: at(tc.now + ttl), Seq: 2, TTL: ttl, DeclarationID: 9}
			if stored != want || !r.Changed {
				t.Errorf("renewed: lease %+v, changed %v; want %+v, changed", stored, r.Changed, want)
			}
		})
	}
}

// TestGrantedLeaseNamesItsDeclaration: a grant's lease is stored with the
// ID of the declaration that got it, and answered.
func TestGrantedLeaseNamesItsDeclaration(t *testing.T) {
	r, err := Machine{LeaseTTL: ttl}.Declare(State{}, Declaration{Cluster: east, Epoch: 1, ID: 5, KeepLeaseOf: 4}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if r.Answer.Outcome != Granted || r.Answer.Lease.DeclarationID != 5 || r.State.Holder.Instances[""] != r.Answer.Lease {
		t.Fatalf("outcome %s, answered lease %+v, stored %+v; want granted with declaration 5's lease", r.Answer.Outcome, r.Answer.Lease, r.State.Holder.Instances[""])
	}
}

// TestStateEqual: State.Equal tells apart states that differ in any part
// the machine changes, and only those.
func TestStateEqual(t *testing.T) {
	base := func() State {
		s := State{Holder: holding(east, 3, 0), Pending: pendingAt(west, 4, 0), LeaseSeq: 2, LastGeneration: 5,
			Clusters: seen(map[Identity]uint64{east: 3, west: 4})}
		s.Holder.RevokedInstances = map[string]RevokedInstance{"old": {Epoch: 2, EndedAt: at(0)}}
		return s
	}
	tests := map[string]struct {
		edit func(*State)
		want bool
	}{
		"the same":                 {edit: func(*State) {}, want: true},
		"a copy":                   {edit: func(s *State) { *s = s.Clone() }, want: true},
		"the lease numbers":        {edit: func(s *State) { s.LeaseSeq++ }},
		"the last generation":      {edit: func(s *State) { s.LastGeneration++ }},
		"no pending takeover":      {edit: func(s *State) { s.Pending = nil }},
		"the pending epoch":        {edit: func(s *State) { s.Pending = pendingAt(west, 5, 0) }},
		"a cluster's record":       {edit: func(s *State) { c := s.Clusters[west.UID]; c.LastDeclaredAt++; s.Clusters[west.UID] = c }},
		"another cluster":          {edit: func(s *State) { s.Clusters[north.UID] = Cluster{Name: north.Name} }},
		"no holder":                {edit: func(s *State) { s.Holder = nil }},
		"the holder's epoch":       {edit: func(s *State) { s.Holder.Epoch++ }},
		"an instance's lease":      {edit: func(s *State) { l := s.Holder.Instances[""]; l.DeclarationID++; s.Holder.Instances[""] = l }},
		"a revoked instance":       {edit: func(s *State) { delete(s.Holder.RevokedInstances, "old") }},
		"the holder's revocation":  {edit: func(s *State) { s.Holder.RevokedBy = "operator" }},
		"the pending copy marker":  {edit: func(s *State) { s.Pending.Copy = true }},
		"the holder's lease end":   {edit: func(s *State) { s.Holder.LeaseExpiresAt++ }},
		"the holder's acquisition": {edit: func(s *State) { s.Holder.AcquiredAt++ }},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s, o := base(), base()
			tc.edit(&o)
			if got := s.Equal(o); got != tc.want {
				t.Errorf("Equal = %v, want %v", got, tc.want)
			}
			if got := o.Equal(s); got != tc.want {
				t.Errorf("Equal the other way = %v, want %v", got, tc.want)
			}
		})
	}
}

package statemachine

import (
	"errors"
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"
)

// generations is east's record with the current and previous generation
// given, issued at issuedAt, and presented by east's processes.
func generations(s State, current, previous uint64, issuedAt time.Duration) State {
	c := s.Clusters[east.UID]
	c.Generation, c.PreviousGeneration, c.GenerationAt, c.PresentsGeneration = current, previous, at(issuedAt), true
	s.Clusters[east.UID] = c
	return s
}

// TestClusterGeneration: a declaration must present its cluster's current
// or previous generation, unless it raises the cluster's epoch; a copy of
// the cluster restored from an older backup presents an older one and is
// refused, with nothing recorded. The generation moves on when the
// cluster is granted the fence and every period while it declares.
func TestClusterGeneration(t *testing.T) {
	machine := Machine{LeaseTTL: ttl, GenerationPeriod: time.Minute}
	holdingEast := func() State {
		return State{Holder: holding(east, 3, 0), Clusters: seen(map[Identity]uint64{east: 3, west: 4})}
	}
	const g1, g2, g3 = 100, 200, 300
	tests := map[string]struct {
		state      State
		decl       Declaration
		now        time.Duration
		wantErr    bool
		want       Outcome
		wantGen    uint64
		wantPrevGn uint64
	}{
		"the first declaration issues a generation": {
			decl: declare(east, 3), now: time.Second,
			want: Granted, wantGen: uint64(at(time.Second)),
		},
		"a record without a generation accepts any and issues one": {
			state: holdingEast(), decl: withGeneration(declareAs(east, 3, "pod"), 42), now: time.Second,
			want: Renewed, wantGen: uint64(at(time.Second)),
		},
		"the current generation is accepted and kept within the period": {
			state: generations(holdingEast(), g2, g1, 0), decl: withGeneration(declare(east, 3), g2), now: 10 * time.Second,
			want: Renewed, wantGen: g2, wantPrevGn: g1,
		},
		"the previous generation is accepted: its process has not heard of the current one yet": {
			state: generations(holdingEast(), g2, g1, 0), decl: withGeneration(declare(east, 3), g1), now: 10 * time.Second,
			want: Renewed, wantGen: g2, wantPrevGn: g1,
		},
		"the generation moves on once the period passed": {
			state: generations(holdingEast(), g2, g1, 0), decl: withGeneration(declare(east, 3), g2), now: time.Minute,
			want: Renewed, wantGen: uint64(at(time.Minute)), wantPrevGn: g2,
		},
		"an older generation at the cluster's highest epoch is a restored copy": {
			state: generations(holdingEast(), g3, g2, 0), decl: withGeneration(declare(east, 3), g1), now: time.Second,
			wantErr: true,
		},
		"a generation never issued is refused too": {
			state: generations(holdingEast(), g3, g2, 0), decl: withGeneration(declare(east, 3), g3+1), now: time.Second,
			wantErr: true,
		},
		"no generation, once the cluster had two, is refused": {
			state: generations(holdingEast(), g3, g2, 0), decl: declare(east, 3), now: time.Second,
			wantErr: true,
		},
		"no generation, from a cluster whose processes never presented one, is a client that knows none": {
			state: func() State {
				s := generations(holdingEast(), g3, g2, 0)
				c := s.Clusters[east.UID]
				c.PresentsGeneration = false
				s.Clusters[east.UID] = c
				return s
			}(),
			decl: declare(east, 3), now: time.Second,
			want: Renewed, wantGen: g3, wantPrevGn: g2,
		},
		"no generation, while the cluster has had one only, is a process that just started": {
			state: generations(holdingEast(), g1, 0, 0), decl: declareAs(east, 3, "pod-2"), now: time.Second,
			want: Renewed, wantGen: g1,
		},
		"a raised epoch with the current generation is the holder's own raise": {
			state: generations(holdingEast(), g3, g2, 0), decl: withGeneration(declare(east, 4), g3), now: time.Second,
			want: Renewed, wantGen: g3, wantPrevGn: g2,
		},
		"a raised epoch with a stale generation is an operator's failover to a copy: it waits for the holder's leases": {
			state: generations(holdingEast(), g3, g2, 0), decl: withGeneration(declare(east, 4), g1), now: time.Second,
			want: Acquiring, wantGen: g3, wantPrevGn: g2,
		},
		"a copy's takeover is granted once the holder's leases ended; the copy's generations go on from the one it presented": {
			state: generations(holdingEast(), g3, g2, 0), decl: withGeneration(declare(east, 4), g1), now: ttl + time.Second,
			want: Granted, wantGen: uint64(at(ttl + time.Second)), wantPrevGn: g1,
		},
		"the previous generation never moves the generation on: a process whose answer was lost is not stranded": {
			state: generations(holdingEast(), g2, g1, 0), decl: withGeneration(declare(east, 3), g1), now: time.Minute,
			want: Renewed, wantGen: g2, wantPrevGn: g1,
		},
		"a grant to a process that presents the previous generation moves nothing either": {
			state: State{Holder: holding(west, 4, 0), Clusters: generations(State{Clusters: seen(map[Identity]uint64{east: 3, west: 4})}, g2, g1, 0).Clusters},
			decl:  withGeneration(declare(east, 5), g1), now: time.Minute / 2,
			want: Granted, wantGen: g2, wantPrevGn: g1,
		},
		"a lower epoch is a regression, whatever the generation": {
			state: generations(holdingEast(), g3, g2, 0), decl: withGeneration(declare(east, 2), g1), now: time.Second,
			want: Regressed, wantGen: g3, wantPrevGn: g2,
		},
		"a grant issues a new generation": {
			state: State{Holder: holding(west, 4, 0), Clusters: generations(State{Clusters: seen(map[Identity]uint64{east: 3, west: 4})}, g2, g1, 0).Clusters},
			decl:  withGeneration(declare(east, 5), g2), now: time.Minute / 2,
			want: Granted, wantGen: uint64(at(time.Minute / 2)), wantPrevGn: g2,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if tc.state.Clusters == nil {
				tc.state.Clusters = map[string]Cluster{}
			}
			before := tc.state.Clone()
			got, err := machine.Declare(tc.state, tc.decl, t0.Add(tc.now))
			if tc.wantErr {
				var restored *RestoredError
				if !errors.As(err, &restored) || restored.Presented != tc.decl.Generation || restored.Current != before.Clusters[east.UID].Generation {
					t.Fatalf("error = %v, want a RestoredError for generation %d", err, tc.decl.Generation)
				}
				if !reflect.DeepEqual(got, Result{}) || !reflect.DeepEqual(tc.state, before) {
					t.Fatalf("a restored copy's declaration changed something: %+v", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Declare: %v", err)
			}
			record := got.State.Clusters[tc.decl.Cluster.UID]
			if got.Answer.Outcome != tc.want || record.Generation != tc.wantGen || record.PreviousGeneration != tc.wantPrevGn {
				t.Fatalf("outcome %s, generation %d (previous %d); want %s, %d (previous %d)",
					got.Answer.Outcome, record.Generation, record.PreviousGeneration, tc.want, tc.wantGen, tc.wantPrevGn)
			}
			wantAnswered := tc.wantGen
			if tc.want == Regressed {
				wantAnswered = 0
			}
			if got.Answer.ClusterGeneration != wantAnswered {
				t.Errorf("answer gives generation %d, want %d", got.Answer.ClusterGeneration, wantAnswered)
			}
		})
	}
}

// TestGenerationsNeverRepeat: a generation is the time it is issued, or one
// above the last one the domain issued when the clock is behind it, so that
// a cluster forgotten and declared anew is handed neither a generation a
// backup of it holds nor one below those its processes already saw (they
// keep the highest, and would present that one).
func TestGenerationsNeverRepeat(t *testing.T) {
	machine := Machine{LeaseTTL: ttl, GenerationPeriod: time.Minute}
	r, err := machine.Declare(State{}, declare(east, 3), t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if r, err = machine.Declare(r.State, declare(west, 2), t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	old := r.State.Clusters[west.UID].Generation
	f, err := machine.Forget(r.State, Forgetting{Cluster: west}, t0.Add(time.Minute))
	if err != nil || f.Outcome != Forgotten {
		t.Fatalf("forget west: %v, %v", f.Outcome, err)
	}
	// The replica that runs the next declaration has a clock a minute
	// behind.
	if r, err = machine.Declare(f.State, declare(west, 2), t0); err != nil {
		t.Fatal(err)
	}
	if got := r.State.Clusters[west.UID].Generation; got <= old {
		t.Errorf("west declared anew behind the clock is handed generation %d, not above %d it had before it was forgotten", got, old)
	}

	c := Cluster{}
	var last uint64
	c.rotateGeneration(at(time.Minute), &last)
	first := c.Generation
	c.rotateGeneration(at(0), &last)
	if c.Generation != first+1 || c.PreviousGeneration != first || last != c.Generation {
		t.Fatalf("after a clock step back: generation %d (previous %d, last %d), want %d (previous %d, last the same)", c.Generation, c.PreviousGeneration, last, first+1, first)
	}
}

func withGeneration(d Declaration, g uint64) Declaration {
	d.Generation = g
	return d
}

// TestPresentingAGenerationIsRemembered: once a process of the cluster
// presented a current generation, a process that presents none is no
// longer taken for a client that knows none.
func TestPresentingAGenerationIsRemembered(t *testing.T) {
	machine := Machine{LeaseTTL: ttl, GenerationPeriod: time.Minute}
	s := State{}
	r, err := machine.Declare(s, declare(east, 1), t0)
	if err != nil || r.State.Clusters[east.UID].PresentsGeneration {
		t.Fatalf("first declaration, presenting none: %v, record %+v", err, r.State.Clusters[east.UID])
	}
	g := r.Answer.ClusterGeneration
	if r, err = machine.Declare(r.State, withGeneration(declare(east, 1), g), t0.Add(time.Second)); err != nil || !r.State.Clusters[east.UID].PresentsGeneration {
		t.Fatalf("presenting generation %d: %v, record %+v", g, err, r.State.Clusters[east.UID])
	}
	// Two periods on, a process presenting none is refused.
	for i := range 2 {
		if r, err = machine.Declare(r.State, withGeneration(declare(east, 1), r.Answer.ClusterGeneration), t0.Add(time.Duration(i+1)*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	var restored *RestoredError
	if _, err := machine.Declare(r.State, declareAs(east, 1, "old"), t0.Add(2*time.Minute+time.Second)); !errors.As(err, &restored) {
		t.Fatalf("a process presenting no generation after the cluster's did: %v, want a RestoredError", err)
	}
}

// TestCopyTakesOverFromTheHolder: a copy of the holder restored from a
// backup (same name and UID, a stale generation) that an operator fails
// over to by raising its epoch never holds the fence beside the holder's
// instances, which may be the other copy's: every declaration of the
// cluster at the raised epoch is acquiring until their leases end, even
// once the copy presents the current generation it learned from its
// answer, while the holder's instances at the old epoch are regressed.
func TestCopyTakesOverFromTheHolder(t *testing.T) {
	machine := Machine{LeaseTTL: ttl, GenerationPeriod: time.Minute}
	const g1, g2, g3 = 100, 200, 300
	s := generations(State{Holder: holding(east, 3, 0), Clusters: seen(map[Identity]uint64{east: 3})}, g3, g2, 0)
	steps := []struct {
		decl Declaration
		now  time.Duration
		want Outcome
	}{
		{withGeneration(declareAs(east, 4, "copy-a"), g1), time.Second, Acquiring},
		{withGeneration(declareAs(east, 4, "copy-a"), g3), 2 * time.Second, Acquiring},
		{withGeneration(declareAs(east, 4, "copy-b"), g3), 2 * time.Second, Acquiring},
		// An instance of the holder's own name, at the raised epoch: it
		// may be either copy's, so it waits too.
		{withGeneration(declare(east, 4), g3), 3 * time.Second, Acquiring},
		{withGeneration(declare(east, 3), g3), 3 * time.Second, Regressed},
		{withGeneration(declareAs(east, 4, "copy-a"), g3), ttl + time.Second, Granted},
		{withGeneration(declareAs(east, 4, "copy-b"), g3), ttl + 2*time.Second, Renewed},
	}
	for i, step := range steps {
		r, err := machine.Declare(s, step.decl, t0.Add(step.now))
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if r.Answer.Outcome != step.want {
			t.Fatalf("step %d: %s of %s at epoch %d, want %s", i, r.Answer.Outcome, step.decl.Instance, step.decl.Epoch, step.want)
		}
		s = r.State
		if i == len(steps)-1 {
			break
		}
		if p := s.Pending; step.want == Acquiring && (p == nil || !p.Copy) {
			t.Fatalf("step %d: pending %+v, want a copy's takeover", i, p)
		}
	}
	if got := slices.Sorted(maps.Keys(s.Holder.Instances)); !slices.Equal(got, []string{"copy-a", "copy-b"}) {
		t.Errorf("the copy holds with instances %v, want only its own", got)
	}
}

package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fencegate/fencegate/authority/statemachine"
)

// bindingStep is one call of TestClusterUIDIsBoundInEveryDomain.
type bindingStep struct {
	domain string
	// id declares (at epoch 1), or is forgotten with forget.
	id     statemachine.Identity
	forget bool
	// dropBindingKey deletes id's binding key before the call, as for a
	// record stored before the keys existed.
	dropBindingKey bool
	// wantBound, if set, expects a *BindingError naming this cluster and
	// the domains wantDomains; else the call must succeed.
	wantBound   string
	wantDomains []string
}

func declareStep(domain string, id statemachine.Identity) bindingStep {
	return bindingStep{domain: domain, id: id}
}

func (s bindingStep) refused(bound string, domains ...string) bindingStep {
	s.wantBound, s.wantDomains = bound, domains
	return s
}

// TestClusterUIDIsBoundInEveryDomain: a cluster UID recorded under a name
// in any domain is bound to that name in every domain, so that a cluster
// cannot squat another cluster's UID in a domain the other has not joined
// yet; a refused declaration records nothing; only a UID no domain records
// is bound by whoever declares it first, and ForgetCluster in every domain
// that records it clears a wrong binding.
func TestClusterUIDIsBoundInEveryDomain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := embeddedEtcd(t)
	west := statemachine.Identity{Name: "west", UID: "uid-west"}
	eastAsWest := statemachine.Identity{Name: "east", UID: "uid-west"}
	renamed := statemachine.Identity{Name: "west-2", UID: "uid-west"}
	north := statemachine.Identity{Name: "north", UID: "uid-north"}

	tests := map[string][]bindingStep{
		"another cluster's uid, in a domain its cluster has not joined, is refused; the cluster joins later": {
			declareStep("payments", west),
			declareStep("search", eastAsWest).refused("west", "payments"),
			declareStep("search", west),
			declareStep("payments", eastAsWest).refused("west"),
		},
		"a uid joins every domain under its own name": {
			declareStep("payments", west),
			declareStep("search", west),
			declareStep("default", west),
		},
		"a new uid is bound by its first declaration; forgetting it there clears the binding": {
			declareStep("search", north), // holds the fence, so that the others may be forgotten
			declareStep("search", eastAsWest),
			declareStep("payments", west).refused("east", "search"),
			{domain: "search", id: eastAsWest, forget: true},
			declareStep("payments", west),
			declareStep("search", eastAsWest).refused("west", "payments"),
		},
		"a uid recorded before binding keys existed is bound by its record": {
			declareStep("payments", west),
			declareStep("search", eastAsWest).refused("west", "payments"),
			{domain: "search", id: eastAsWest, dropBindingKey: true, wantBound: "west", wantDomains: []string{"payments"}},
			{domain: "search", id: west, dropBindingKey: true},
			declareStep("default", eastAsWest).refused("west", "payments", "search"),
		},
		"a rename: forget the old name in every domain, then declare the new one": {
			declareStep("payments", north),
			declareStep("search", north),
			declareStep("payments", west),
			declareStep("search", west),
			declareStep("default", renamed).refused("west", "payments", "search"),
			{domain: "payments", id: west, forget: true},
			declareStep("default", renamed).refused("west", "search"),
			{domain: "search", id: west, forget: true},
			declareStep("default", renamed),
			declareStep("payments", west).refused("west-2", "default"),
		},
	}
	n := 0
	for name, steps := range tests {
		n++
		prefix := fmt.Sprintf("/binding-%d/", n)
		t.Run(name, func(t *testing.T) {
			s, err := New(client, Options{LeaseTTL: time.Minute, Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			for i, st := range steps {
				if st.dropBindingKey {
					if _, err := client.Delete(ctx, s.bindingKey(st.id.UID)); err != nil {
						t.Fatal(err)
					}
				}
				before, err := s.Get(ctx, st.domain)
				if err != nil {
					t.Fatal(err)
				}
				if st.forget {
					if r, _, err := s.Forget(ctx, st.domain, statemachine.Forgetting{Cluster: st.id}, Actor{}); err != nil || r.Outcome != statemachine.Forgotten {
						t.Fatalf("step %d: forget %v in %s: %v, %v", i, st.id, st.domain, r.Outcome, err)
					}
					continue
				}
				_, err = s.Declare(ctx, st.domain, statemachine.Declaration{Cluster: st.id, Epoch: 1}, Actor{})
				var bindingErr *statemachine.BindingError
				switch {
				case st.wantBound == "" && err != nil:
					t.Fatalf("step %d: %v declares in %s: %v", i, st.id, st.domain, err)
				case st.wantBound == "":
					continue
				case !errors.As(err, &bindingErr):
					t.Fatalf("step %d: %v declares in %s: %v, want a BindingError naming %s", i, st.id, st.domain, err, st.wantBound)
				}
				want := &statemachine.BindingError{UID: st.id.UID, Declared: st.id.Name, Bound: st.wantBound, Domains: st.wantDomains}
				if diff := cmp.Diff(want, bindingErr); diff != "" {
					t.Fatalf("step %d: %v declares in %s: refusal (-want +got):\n%s", i, st.id, st.domain, diff)
				}
				after, err := s.Get(ctx, st.domain)
				if err != nil {
					t.Fatal(err)
				}
				if after.Revision != before.Revision {
					t.Fatalf("step %d: the refused declaration changed the record of %s: %+v, was %+v", i, st.domain, after.State, before.State)
				}
			}
		})
	}
}

// TestFirstDeclarationsOfOneUIDRace: two replicas take the first
// declarations of one UID under two names, in two domains, at once; the
// binding key, written on the condition that it did not change since it
// was read, lets exactly one of them in.
func TestFirstDeclarationsOfOneUIDRace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := embeddedEtcd(t)
	a, b := newStore(t, client, nil), newStore(t, client, nil)
	for round := range 30 {
		uid := fmt.Sprintf("uid-%d", round)
		calls := []struct {
			s      *Store
			domain string
			id     statemachine.Identity
		}{
			{a, "payments", statemachine.Identity{Name: "east", UID: uid}},
			{b, "search", statemachine.Identity{Name: "west", UID: uid}},
		}
		errs := make([]error, len(calls))
		var start, done sync.WaitGroup
		start.Add(1)
		for i, c := range calls {
			done.Add(1)
			go func() {
				defer done.Done()
				start.Wait()
				_, errs[i] = c.s.Declare(ctx, c.domain, statemachine.Declaration{Cluster: c.id, Epoch: 1}, Actor{})
			}()
		}
		start.Done()
		done.Wait()
		var bindingErr *statemachine.BindingError
		granted := 0
		for i, err := range errs {
			switch {
			case err == nil:
				granted++
			case !errors.As(err, &bindingErr):
				t.Fatalf("round %d: %v declares in %s: %v", round, calls[i].id, calls[i].domain, err)
			}
		}
		if granted != 1 {
			t.Fatalf("round %d: %d of the two first declarations of %s under two names were accepted, want exactly 1: %v", round, granted, uid, errs)
		}
		// The binding key names the one that got in.
		resp, err := client.Get(ctx, a.bindingKey(uid))
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("round %d: binding key of %s: %v, %v", round, uid, resp, err)
		}
		if want := fmt.Sprintf(`{"version":%d,"name":%q}`, recordVersion, bindingErr.Bound); string(resp.Kvs[0].Value) != want {
			t.Fatalf("round %d: binding key of %s is %s, want %s", round, uid, resp.Kvs[0].Value, want)
		}
	}
}

package statemachine

import (
	"errors"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// dnsLabelPattern is RFC 1123's label, written out here so that the fuzz
// targets check validation against an independent statement of the rule.
var dnsLabelPattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// fuzzStates are the states single requests are fuzzed against: no fence
// yet, a holder, a holder with a pending takeover, a released holder and a
// holder whose lease has ended.
func fuzzStates() []State {
	clusters := seen(map[Identity]uint64{east: 3, west: 2})
	return []State{
		{},
		{Holder: holding(east, 3, 0), Clusters: clusters},
		{Holder: holding(east, 3, 0), Pending: pendingAt(west, 4, 0), Clusters: seen(map[Identity]uint64{east: 3, west: 4})},
		{Holder: released(holding(east, 3, 0)), Clusters: clusters},
		{Holder: holding(east, 3, -2*ttl), Clusters: clusters},
	}
}

// checkFieldError checks that err names one of fields and says what is
// wrong with it.
func checkFieldError(t *testing.T, err error, fields ...string) {
	t.Helper()
	var fe *FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("error %v (%T) is not a *FieldError", err, err)
	}
	if !slices.Contains(fields, fe.Field) || fe.Problem == "" || !strings.HasPrefix(fe.Error(), fe.Field+": ") {
		t.Fatalf("field error %q: want one of the fields %v and what is wrong with it", fe.Error(), fields)
	}
}

// checkValid checks fields that were accepted against the rules written
// out independently: DNS labels, a UID of at most 128 printable characters,
// an epoch of at least 1.
func checkValid(t *testing.T, domain, name, uid string, epoch uint64) {
	t.Helper()
	switch {
	case !dnsLabelPattern.MatchString(Normalize(domain)):
		t.Fatalf("accepted domain %q, which is not a DNS label", domain)
	case name != "" && !dnsLabelPattern.MatchString(name):
		t.Fatalf("accepted cluster name %q, which is not a DNS label", name)
	case uid == "" || len(uid) > 128 || strings.ContainsFunc(uid, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		t.Fatalf("accepted cluster uid %q", uid)
	case epoch == 0:
		t.Fatal("accepted epoch 0")
	}
}

// FuzzDeclare sends arbitrary declarations to each kind of state: a bad
// field is refused with an error that names it, a good one never changes
// the state it was given, records the cluster's highest epoch, and moves
// the fence only as the rules allow.
func FuzzDeclare(f *testing.F) {
	f.Add("", "east", "uid-east", uint64(3), int64(0))
	f.Add("payments", "west", "uid-west", uint64(5), int64(ttl))
	f.Add("default", "north", "uid-north", uint64(4), int64(-ttl))
	f.Add("Prod", "east", "uid-east", uint64(1), int64(0))
	f.Add("", "east_1", "uid east", uint64(0), int64(0))
	f.Add("", "west", strings.Repeat("u", 129), uint64(9), int64(0))
	f.Add("", "east", "uid-west", uint64(7), int64(3*ttl))
	machine := Machine{LeaseTTL: ttl}
	f.Fuzz(func(t *testing.T, domain, name, uid string, epoch uint64, offset int64) {
		now := t0.Add(time.Duration(offset % int64(24*time.Hour)))
		d := Declaration{Domain: domain, Cluster: Identity{Name: name, UID: uid}, Epoch: epoch}
		for _, s := range fuzzStates() {
			before := s.Clone()
			r, err := machine.Declare(s, d, now)
			if !reflect.DeepEqual(s, before) {
				t.Fatalf("Declare changed the state it was given: %+v, was %+v", s, before)
			}
			if err != nil {
				checkFieldError(t, err, "domain", "cluster_name", "cluster_uid", "epoch")
				if !reflect.DeepEqual(r, Result{}) {
					t.Fatalf("a refused request returned a result: %+v", r)
				}
				continue
			}
			checkValid(t, domain, name, uid, epoch)
			if name == "" {
				t.Fatal("accepted an empty cluster name")
			}
			checkDeclared(t, s, r, d, now, ttl)
		}
	})
}

// checkDeclared checks what one declaration did to state s.
func checkDeclared(t *testing.T, s State, r Result, d Declaration, now time.Time, lease time.Duration) {
	t.Helper()
	record := r.State.Clusters[d.Cluster.UID]
	prev := s.Clusters[d.Cluster.UID]
	if record.HighestEpoch != max(prev.HighestEpoch, d.Epoch) || record.LastEpoch != d.Epoch || record.LastDeclaredAt != At(now) || record.Name != d.Cluster.Name {
		t.Fatalf("record of the declaring cluster = %+v after %+v (was %+v)", record, d, prev)
	}
	for uid, c := range s.Clusters {
		if uid != d.Cluster.UID && r.State.Clusters[uid] != c {
			t.Fatalf("the record of another cluster changed: %+v, was %+v", r.State.Clusters[uid], c)
		}
	}
	if (d.Epoch < prev.HighestEpoch) != (r.Answer.Outcome == Regressed) {
		t.Fatalf("declared %d after a highest epoch of %d: outcome %v", d.Epoch, prev.HighestEpoch, r.Answer.Outcome)
	}
	old, next := s.Holder, r.State.Holder
	switch r.Answer.Outcome {
	case Granted:
		if next == nil || !next.Is(d.Cluster) || next.Epoch != d.Epoch || next.Token != 0 || next.LeaseExpiresAt != At(now).Add(lease) || r.State.Pending != nil {
			t.Fatalf("granted, but the holder is %+v and pending %+v", next, r.State.Pending)
		}
		if old != nil && (d.Epoch <= old.Epoch || !old.Released && At(now) < old.LeaseExpiresAt) {
			t.Fatalf("the fence moved from %+v to %+v at %d: only a strictly higher epoch takes it, and only once the holder released or its lease ended", old, d, At(now))
		}
	case Renewed:
		if old == nil || !old.Is(d.Cluster) || next.Token != old.Token || next.AcquiredAt != old.AcquiredAt || next.Epoch < old.Epoch || next.Released {
			t.Fatalf("renewed %+v as %+v", old, next)
		}
	default:
		if !reflect.DeepEqual(old, next) {
			t.Fatalf("a refused declaration (%v) changed the holder from %+v to %+v", r.Answer.Outcome, old, next)
		}
	}
	if p := r.State.Pending; p != nil && (next == nil || p.Epoch <= next.Epoch || p.UID == next.UID && p.Name == next.Name) {
		t.Fatalf("pending takeover %+v of holder %+v: a takeover needs a higher epoch than the holder's", p, next)
	}
}

// FuzzRelease sends arbitrary releases to each kind of state: a bad field
// is refused with an error that names it; a good one changes at most the
// holder's released mark, and only for the holder at its epoch or above.
func FuzzRelease(f *testing.F) {
	f.Add("", "uid-east", uint64(3))
	f.Add("", "uid-east", uint64(2))
	f.Add("", "uid-west", uint64(9))
	f.Add("payments", "uid-east", uint64(3))
	f.Add("a_b", "", uint64(0))
	machine := Machine{LeaseTTL: ttl}
	f.Fuzz(func(t *testing.T, domain, uid string, epoch uint64) {
		rel := Release{Domain: domain, ClusterUID: uid, Epoch: epoch}
		for _, s := range fuzzStates() {
			before := s.Clone()
			r, err := machine.Release(s, rel)
			if !reflect.DeepEqual(s, before) {
				t.Fatalf("Release changed the state it was given: %+v, was %+v", s, before)
			}
			if err != nil {
				checkFieldError(t, err, "domain", "cluster_uid", "epoch")
				continue
			}
			checkValid(t, domain, "", uid, epoch)
			checkReleased(t, s, r, rel)
		}
	})
}

// checkReleased checks what one release did to state s.
func checkReleased(t *testing.T, s State, r ReleaseResult, rel Release) {
	t.Helper()
	after := r.State.Clone()
	if after.Holder != nil {
		after.Holder.Released = s.Holder.Released
	}
	if !reflect.DeepEqual(after, s.Clone()) {
		t.Fatalf("release %+v changed more than the released mark: %+v, was %+v", rel, r.State, s)
	}
	h := s.Holder
	holds := h != nil && h.UID == rel.ClusterUID && rel.Epoch >= h.Epoch
	if (r.Outcome == Released || r.Outcome == AlreadyReleased) != holds || (r.State.Holder != nil && r.State.Holder.Released != (holds || h.Released)) {
		t.Fatalf("release %+v of holder %+v: outcome %v, holder after %+v", rel, h, r.Outcome, r.State.Holder)
	}
}

// identities are the clusters of FuzzSequence: three clusters, and the
// first one again under another name (a renamed cluster keeps its UID).
var identities = []Identity{east, west, north, {Name: "east-renamed", UID: east.UID}}

// FuzzSequence plays arbitrary sequences of declarations, releases and the
// passing of time (three bytes per step) against the state machine, storing
// each result the way the store does (a new token per grant), and checks
// after every step: the fence moves to a cluster only when no other cluster
// may still believe it holds it (its last lease ended, or it was told it is
// fenced, or it released), tokens only grow, a cluster's highest epoch
// never falls, and the state it was given is never changed.
func FuzzSequence(f *testing.F) {
	f.Add([]byte{0, 4, 0, 0, 9, 8, 1, 13, 40, 2, 12, 0, 0, 9, 0})
	f.Add([]byte{0, 4, 0, 0, 5, 0, 0, 13, 0, 2, 4, 1, 0, 13, 0, 0, 4, 70})
	f.Add([]byte{0, 8, 0, 0, 7, 1, 0, 15, 2, 3, 0, 0, 2, 6, 0, 0, 15, 0})
	machine := Machine{LeaseTTL: ttl}
	f.Fuzz(func(t *testing.T, steps []byte) {
		var s State
		now := t0
		token := uint64(100)
		highest := map[string]uint64{}
		// believes holds, per identity, until when it may believe that it
		// holds the fence: the end of the lease of its last OK answer.
		believes := map[Identity]time.Time{}
		for i := 0; i+2 < len(steps); i += 3 {
			op, who, wait := steps[i], steps[i+1], steps[i+2]
			now = now.Add(time.Duration(wait%64) * ttl / 32)
			c := identities[int(who)%len(identities)]
			epoch := uint64(who/4) % 8
			before := s.Clone()
			switch op % 3 {
			case 0, 1:
				d := Declaration{Cluster: c, Epoch: epoch}
				r, err := machine.Declare(s, d, now)
				if !reflect.DeepEqual(s, before) {
					t.Fatalf("step %d: Declare changed the state it was given", i/3)
				}
				if err != nil {
					if epoch != 0 {
						t.Fatalf("step %d: %+v refused: %v", i/3, d, err)
					}
					continue
				}
				checkDeclared(t, s, r, d, now, ttl)
				switch r.Answer.Outcome {
				case Granted:
					for other, until := range believes {
						if !r.State.Holder.Is(other) && now.Before(until) {
							t.Fatalf("step %d: granted to %s at %s while %s may believe it holds the fence until %s",
								i/3, c.Name, now.Sub(t0), other.Name, until.Sub(t0))
						}
					}
					token++
					r.State.Holder.Token = token
					believes[c] = now.Add(ttl)
				case Renewed:
					believes[c] = now.Add(ttl)
				default:
					// Told it does not hold the fence, the agent stops
					// acting as holder before it does anything else.
					delete(believes, c)
				}
				if old, next := s.Holder, r.State.Holder; old != nil && next.Token < old.Token {
					t.Fatalf("step %d: token went from %d to %d", i/3, old.Token, next.Token)
				}
				s = r.State
			default:
				rel := Release{ClusterUID: c.UID, Epoch: epoch}
				r, err := machine.Release(s, rel)
				if !reflect.DeepEqual(s, before) {
					t.Fatalf("step %d: Release changed the state it was given", i/3)
				}
				if err != nil {
					if epoch != 0 {
						t.Fatalf("step %d: %+v refused: %v", i/3, rel, err)
					}
					continue
				}
				checkReleased(t, s, r, rel)
				if r.Outcome == Released {
					// Whoever releases (the holder's agent, told it is
					// fenced, or an operator) does so once the cluster
					// stopped acting as holder.
					for id := range believes {
						if id.UID == c.UID {
							delete(believes, id)
						}
					}
				}
				s = r.State
			}
			for uid, record := range s.Clusters {
				if record.HighestEpoch < highest[uid] {
					t.Fatalf("step %d: the highest epoch of %s fell from %d to %d", i/3, uid, highest[uid], record.HighestEpoch)
				}
				highest[uid] = record.HighestEpoch
			}
		}
	})
}

package statemachine

import (
	"errors"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
)

// dnsLabelPattern is RFC 1123's label, written out here so that the fuzz
// targets check validation against an independent statement of the rule.
var dnsLabelPattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// fuzzStates are the states single requests are fuzzed against: no fence
// yet, a holder, a holder with a pending takeover, a released holder, a
// holder whose lease has ended, a holder with instances in every state of
// their lease (running, released, ended), at the epochs of a rollout, and
// a holder stored before instances had leases.
func fuzzStates() []State {
	clusters := seen(map[Identity]uint64{east: 3, west: 2})
	return []State{
		{},
		{Holder: holding(east, 3, 0), Clusters: clusters},
		{Holder: holding(east, 3, 0), Pending: pendingAt(west, 4, 0), Clusters: seen(map[Identity]uint64{east: 3, west: 4})},
		{Holder: released(holding(east, 3, 0)), Clusters: clusters},
		{Holder: holding(east, 3, -2*ttl), Clusters: clusters},
		{Holder: instances(holding(east, 3, 0), map[string]Lease{
			"a": lease(3, 0), "b": releasedLease(3, ttl/2), "c": lease(2, -ttl), "d": releasedLease(2, -2*ttl), "e": lease(3, ttl),
		}), Pending: pendingAt(west, 4, 0), Clusters: seen(map[Identity]uint64{east: 3, west: 4})},
		{Holder: &Holder{Identity: east, Epoch: 3, AcquiredAt: at(0), LeaseExpiresAt: at(ttl), Token: 10}, Clusters: clusters},
	}
}

// checkSummary checks a holder's lease end and released mark against its
// instances, with the rule written out independently.
func checkSummary(t *testing.T, h *Holder) {
	t.Helper()
	if h == nil {
		return
	}
	if len(h.Instances) == 0 {
		t.Fatalf("holder %+v has no instance", h)
	}
	allReleased := true
	var latest, latestUnreleased UnixNano
	for _, l := range h.Instances {
		allReleased = allReleased && l.Released
		latest = max(latest, l.ExpiresAt)
		if !l.Released {
			latestUnreleased = max(latestUnreleased, l.ExpiresAt)
		}
	}
	want := latestUnreleased
	if allReleased {
		want = latest
	}
	if h.Released != allReleased || h.LeaseExpiresAt != want {
		t.Fatalf("holder %+v: want released=%v and a lease end of %d from its instances", h, allReleased, want)
	}
}

// free reports whether no instance of h may believe it is active at at,
// written out independently of Holder.Free.
func free(h *Holder, at UnixNano) bool {
	for _, l := range h.Instances {
		if !l.Released && at < l.ExpiresAt {
			return false
		}
	}
	return true
}

// checkFieldError checks that err names one of fields and says what is
// wrong with it.
func checkFieldError(t *testing.T, err error, fields ...string) {
	t.Helper()
	var fe *rpctypes.FieldError
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
func checkValid(t *testing.T, name, uid string, epoch uint64) {
	t.Helper()
	switch {
	case name != "" && !dnsLabelPattern.MatchString(name):
		t.Fatalf("accepted cluster name %q, which is not a DNS label", name)
	case uid == "" || len(uid) > 128 || strings.ContainsFunc(uid, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		t.Fatalf("accepted cluster uid %q", uid)
	case epoch == 0:
		t.Fatal("accepted epoch 0")
	}
}

// checkValidInstance checks an accepted instance name against the rule
// written out independently: UTF-8, at most 253 bytes, no space or
// control character.
func checkValidInstance(t *testing.T, instance string) {
	t.Helper()
	if !utf8.ValidString(instance) || len(instance) > 253 || strings.ContainsFunc(instance, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		t.Fatalf("accepted instance %q", instance)
	}
}

// FuzzDeclare sends arbitrary declarations to each kind of state: a bad
// field is refused with an error that names it, a good one never changes
// the state it was given, records the cluster's highest epoch, and moves
// the fence only as the rules allow.
func FuzzDeclare(f *testing.F) {
	f.Add("east", "uid-east", uint64(3), "", int64(0))
	f.Add("west", "uid-west", uint64(5), "", int64(ttl))
	f.Add("north", "uid-north", uint64(4), "pod-1", int64(-ttl))
	f.Add("east", "uid-east", uint64(1), "", int64(0))
	f.Add("east_1", "uid east", uint64(0), "", int64(0))
	f.Add("west", strings.Repeat("u", 129), uint64(9), "", int64(0))
	f.Add("east", "uid-west", uint64(7), "", int64(3*ttl))
	f.Add("east", "uid-east", uint64(3), "b", int64(ttl/4))
	f.Add("east", "uid-east", uint64(4), "f", int64(ttl/4))
	f.Add("east", "uid-east", uint64(3), "pod 1", int64(0))
	machine := Machine{LeaseTTL: ttl}
	f.Fuzz(func(t *testing.T, name, uid string, epoch uint64, instance string, offset int64) {
		now := t0.Add(time.Duration(offset % int64(24*time.Hour)))
		for _, s := range fuzzStates() {
			d := presenting(s, Declaration{Cluster: Identity{Name: name, UID: uid}, Epoch: epoch, Instance: instance})
			before := s.Clone()
			r, err := machine.Declare(s, d, now)
			if !reflect.DeepEqual(s, before) {
				t.Fatalf("Declare changed the state it was given: %+v, was %+v", s, before)
			}
			if err != nil {
				if record, seen := s.Clusters[uid]; seen && record.Name != name && d.Validate() == nil {
					checkBindingError(t, err, record.Name)
				} else {
					checkFieldError(t, err, "cluster_name", "cluster_uid", "epoch", "instance")
				}
				if !reflect.DeepEqual(r, Result{}) {
					t.Fatalf("a refused request returned a result: %+v", r)
				}
				continue
			}
			checkValid(t, name, uid, epoch)
			checkValidInstance(t, instance)
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
	prev, seen := s.Clusters[d.Cluster.UID]
	if record.HighestEpoch != max(prev.HighestEpoch, d.Epoch) || record.LastEpoch != d.Epoch || record.Name != d.Cluster.Name {
		t.Fatalf("record of the declaring cluster = %+v after %+v (was %+v)", record, d, prev)
	}
	if r.Changed == reflect.DeepEqual(s, r.State) {
		t.Fatalf("Changed = %v, but the state went from %+v to %+v", r.Changed, s, r.State)
	}
	// The time it was seen moves on, unless nothing else changed and the
	// recorded one is younger than the resolution.
	kept := seen && !r.Changed && record.LastDeclaredAt == prev.LastDeclaredAt &&
		At(now) >= prev.LastDeclaredAt && At(now)-prev.LastDeclaredAt < UnixNano(DefaultDeclaredAtResolution)
	if record.LastDeclaredAt != At(now) && !kept {
		t.Fatalf("last declared at %d after a declaration at %d (was %d, changed %v)", record.LastDeclaredAt, At(now), prev.LastDeclaredAt, r.Changed)
	}
	if !r.Changed && (len(r.History) > 0 || len(r.Events) > 0) {
		t.Fatalf("a declaration that changed nothing wrote history %+v and events %v", r.History, r.Events)
	}
	for uid, c := range s.Clusters {
		if uid != d.Cluster.UID && r.State.Clusters[uid] != c {
			t.Fatalf("the record of another cluster changed: %+v, was %+v", r.State.Clusters[uid], c)
		}
	}
	if (d.Epoch < prev.HighestEpoch) != (r.Answer.Outcome == Regressed) {
		t.Fatalf("declared %d after a highest epoch of %d: outcome %v", d.Epoch, prev.HighestEpoch, r.Answer.Outcome)
	}
	old, next := upgraded(s.Holder), r.State.Holder
	checkSummary(t, next)
	own := Lease{Epoch: d.Epoch, ExpiresAt: At(now).Add(lease), Seq: r.State.LeaseSeq, TTL: lease, DeclarationID: d.ID}
	switch r.Answer.Outcome {
	case Granted:
		if next == nil || !next.Is(d.Cluster) || next.Epoch != d.Epoch || next.Token != 0 || !reflect.DeepEqual(next.Instances, map[string]Lease{d.Instance: own}) || r.State.Pending != nil {
			t.Fatalf("granted, but the holder is %+v and pending %+v", next, r.State.Pending)
		}
		if old != nil && (d.Epoch <= old.Epoch || !free(old, At(now))) {
			t.Fatalf("the fence moved from %+v to %+v at %d: only a strictly higher epoch takes it, and only once every instance of the holder released or its lease ended", old, d, At(now))
		}
	case Renewed:
		if old == nil || !old.Is(d.Cluster) || next.Token != old.Token || next.AcquiredAt != old.AcquiredAt || next.Epoch < old.Epoch {
			t.Fatalf("renewed %+v as %+v", old, next)
		}
		// A new lease of this declaration's, or the instance's running
		// lease unchanged, which the declaration asked to keep.
		got := next.Instances[d.Instance]
		if kept := d.KeepLeaseOf != 0 && got.DeclarationID == d.KeepLeaseOf; kept && got != old.Instances[d.Instance] || !kept && got != own || got != r.Answer.Lease {
			t.Fatalf("renewed %+v: lease %+v, answered %+v, was %+v", d, got, r.Answer.Lease, old.Instances[d.Instance])
		}
		if p := s.Pending; p != nil && p.Epoch > d.Epoch {
			t.Fatalf("renewed %+v while a takeover at epoch %d was pending", d, p.Epoch)
		}
		// Every other instance keeps its lease as it was, unless the
		// lease ended: a renewal extends no lease but the declarer's.
		for name, l := range next.Instances {
			if prev, ok := old.Instances[name]; name != d.Instance && (!ok || prev != l) {
				t.Fatalf("renewal by instance %q changed instance %q from %+v to %+v", d.Instance, name, prev, l)
			}
		}
		for name, l := range old.Instances {
			if _, kept := next.Instances[name]; !kept && At(now) < l.ExpiresAt {
				t.Fatalf("renewal by instance %q dropped instance %q, whose lease %+v has not ended", d.Instance, name, l)
			}
		}
	default:
		if !reflect.DeepEqual(old, next) {
			t.Fatalf("a refused declaration (%v) changed the holder from %+v to %+v", r.Answer.Outcome, old, next)
		}
	}
	if r.Answer.Outcome == Acquiring && (old == nil || free(old, At(now)) || r.Answer.RetryAfter <= 0 || At(now).Add(r.Answer.RetryAfter) > old.LeaseExpiresAt) {
		t.Fatalf("acquiring from %+v at %d with retry after %s: want a holder that is not free, and the time until its last lease ends", old, At(now), r.Answer.RetryAfter)
	}
	if p := r.State.Pending; p != nil && (next == nil || p.Epoch <= next.Epoch || p.UID == next.UID && p.Name == next.Name) {
		t.Fatalf("pending takeover %+v of holder %+v: a takeover needs a higher epoch than the holder's", p, next)
	}
}

// FuzzRelease sends arbitrary releases to each kind of state: a bad field
// is refused with an error that names it; a good one changes at most the
// releasing instance's released mark (dropping the instances whose lease
// ended), and only for an instance of the holder with a lease, at the epoch
// it declared or above.
func FuzzRelease(f *testing.F) {
	f.Add("uid-east", uint64(3), "", int64(0))
	f.Add("uid-east", uint64(2), "", int64(0))
	f.Add("uid-west", uint64(9), "", int64(0))
	f.Add("uid-east", uint64(3), "", int64(0))
	f.Add("", uint64(0), "", int64(0))
	f.Add("uid-east", uint64(3), "a", int64(ttl/4))
	f.Add("uid-east", uint64(2), "c", int64(-ttl/2))
	f.Add("uid-east", uint64(3), "e", int64(ttl+ttl/4))
	f.Add("uid-east", uint64(3), "a\nb", int64(0))
	machine := Machine{LeaseTTL: ttl}
	f.Fuzz(func(t *testing.T, uid string, epoch uint64, instance string, offset int64) {
		now := t0.Add(time.Duration(offset % int64(24*time.Hour)))
		rel := Release{ClusterUID: uid, Epoch: epoch, Instance: instance}
		for _, s := range fuzzStates() {
			before := s.Clone()
			r, err := machine.Release(s, rel, now)
			if !reflect.DeepEqual(s, before) {
				t.Fatalf("Release changed the state it was given: %+v, was %+v", s, before)
			}
			if err != nil {
				checkFieldError(t, err, "cluster_uid", "epoch", "instance")
				continue
			}
			checkValid(t, "", uid, epoch)
			checkValidInstance(t, instance)
			checkReleased(t, s, r, rel, now)
		}
	})
}

// upgraded is h as the machine reads it: a holder stored before instances
// had leases has its one lease as instance "".
func upgraded(h *Holder) *Holder {
	if h == nil {
		return nil
	}
	c := State{Holder: h}.Clone().Holder
	c.Upgrade()
	return c
}

// checkReleased checks what one release at now did to state s.
func checkReleased(t *testing.T, s State, r ReleaseResult, rel Release, now time.Time) {
	t.Helper()
	old, next := upgraded(s.Holder), r.State.Holder
	checkSummary(t, next)
	if !reflect.DeepEqual(r.State.Pending, s.Pending) || !reflect.DeepEqual(r.State.Clusters, s.Clusters) {
		t.Fatalf("release %+v changed the pending takeover or the cluster records: %+v, was %+v", rel, r.State, s)
	}
	var l Lease
	var leased bool
	if old != nil {
		l, leased = old.Instances[rel.Instance]
	}
	var want ReleaseOutcome
	switch {
	case old == nil || old.UID != rel.ClusterUID:
		want = NotHolder
	case !leased || At(now) >= l.ExpiresAt:
		want = NoLease
	case rel.Epoch < l.Epoch:
		want = ReleaseRegressed
	case l.Released:
		want = AlreadyReleased
	default:
		want = Released
	}
	if r.Outcome != want {
		t.Fatalf("release %+v at %d of holder %+v: outcome %v, want %v", rel, At(now), old, r.Outcome, want)
	}
	if want != Released {
		if !reflect.DeepEqual(old, next) {
			t.Fatalf("release %+v (%v) changed the holder from %+v to %+v", rel, r.Outcome, old, next)
		}
		return
	}
	// Released: the instance is marked; every other instance is kept as
	// it was, unless its lease ended; nothing else of the holder changes.
	if got := next.Instances[rel.Instance]; !got.Released || got.Epoch != l.Epoch || got.ExpiresAt != l.ExpiresAt {
		t.Fatalf("release %+v: the instance's lease is %+v, was %+v", rel, got, l)
	}
	for name, prev := range old.Instances {
		got, kept := next.Instances[name]
		if name != rel.Instance && (kept && got != prev || !kept && At(now) < prev.ExpiresAt) {
			t.Fatalf("release by instance %q changed instance %q from %+v to %+v (kept %v)", rel.Instance, name, prev, got, kept)
		}
	}
	if len(next.Instances) > len(old.Instances) {
		t.Fatalf("release %+v added instances: %+v, was %+v", rel, next.Instances, old.Instances)
	}
	n, o := *next, *old
	n.Instances, o.Instances, n.Released, o.Released, n.LeaseExpiresAt, o.LeaseExpiresAt = nil, nil, false, false, 0, 0
	if !reflect.DeepEqual(n, o) {
		t.Fatalf("release %+v changed the holder beyond its leases: %+v, was %+v", rel, next, old)
	}
	if slices.Contains(r.Events, HolderReleased) != (next.Released && !old.Released) {
		t.Fatalf("release %+v: events %v, holder released %v (was %v)", rel, r.Events, next.Released, old.Released)
	}
}

// identities are the clusters of FuzzSequence: three clusters, and the
// first one again under another name (a renamed cluster keeps its UID).
var identities = []Identity{east, west, north, {Name: "east-renamed", UID: east.UID}}

// seqInstances are the instances each cluster of FuzzSequence runs: its
// pods, which declare and release each on its own.
var seqInstances = []string{"", "pod-a", "pod-b"}

// process is one instance of a cluster: what acts as holder on its answers.
type process struct {
	cluster  Identity
	instance string
}

// FuzzSequence plays arbitrary sequences of declarations, releases and the
// passing of time (three bytes per step) by the instances of several
// clusters against the state machine, storing each result the way the
// store does (a new token per grant), and checks after every step: the
// fence moves to a cluster only when no instance of another cluster may
// still believe it holds it (its last lease ended, or it was told it does
// not hold the fence, or it released), tokens only grow, a cluster's
// highest epoch never falls, and the state it was given is never changed.
func FuzzSequence(f *testing.F) {
	f.Add([]byte{0, 4, 0, 0, 9, 8, 1, 13, 40, 2, 12, 0, 0, 9, 0})
	f.Add([]byte{0, 4, 0, 0, 5, 0, 0, 13, 0, 2, 4, 1, 0, 13, 0, 0, 4, 70})
	f.Add([]byte{0, 8, 0, 0, 7, 1, 0, 15, 2, 3, 0, 0, 2, 6, 0, 0, 15, 0})
	// Two pods of east hold the fence; west takes over; one pod of east
	// is told it is fenced and releases, the other is partitioned: west
	// waits until that one's lease ended.
	f.Add([]byte{3, 4, 0, 6, 4, 1, 0, 9, 1, 3, 4, 1, 5, 4, 0, 0, 9, 1, 0, 9, 40})
	// A rollout: east's new pod raises the epoch, the old pod is
	// regressed and releases at its own epoch, then west takes over.
	f.Add([]byte{3, 4, 0, 6, 8, 1, 3, 4, 1, 5, 4, 0, 0, 13, 1, 6, 8, 1, 8, 8, 0, 0, 13, 0})
	// East holds; an operator revokes every lease of east; west takes over
	// and must wait for east's lease; the operator forgets a cluster.
	f.Add([]byte{0, 4, 0, 240, 4, 1, 0, 9, 1, 0, 9, 20, 0, 9, 20, 242, 1, 0})
	// An operator revokes one instance of two; the other renews.
	f.Add([]byte{3, 4, 0, 6, 4, 1, 241, 4, 1, 3, 4, 1, 6, 4, 1, 0, 9, 10, 0, 9, 40})
	// East's pod keeps its lease twice, then renews; west takes over once
	// the lease, counted from the declaration that got it, ended.
	f.Add([]byte{0, 4, 0, 1, 4, 4, 1, 4, 4, 0, 9, 2, 1, 4, 4, 0, 9, 30, 0, 9, 30})
	// Two pods of east: one keeps another's declaration's lease (it holds
	// none), the other keeps its own; an operator revokes one.
	f.Add([]byte{0, 4, 0, 3, 4, 0, 4, 4, 2, 1, 4, 2, 241, 4, 1, 1, 4, 2, 0, 9, 40})
	machine := Machine{LeaseTTL: ttl}
	f.Fuzz(func(t *testing.T, steps []byte) {
		var s State
		now := t0
		token := uint64(100)
		highest := map[string]uint64{}
		// believes holds, per process, until when it may believe that it
		// holds the fence: the end of the lease of its last OK answer,
		// counted from the declaration that got it (held).
		believes := map[process]time.Time{}
		type heldLease struct {
			id uint64
			at time.Time
		}
		held := map[process]heldLease{}
		for i := 0; i+2 < len(steps); i += 3 {
			op, who, wait := steps[i], steps[i+1], steps[i+2]
			now = now.Add(time.Duration(wait%64) * ttl / 32)
			c := identities[int(who)%len(identities)]
			epoch := uint64(who/4) % 8
			instance := seqInstances[int(op/3)%len(seqInstances)]
			p := process{c, instance}
			before := s.Clone()
			switch {
			case op >= 240:
				// An operator: revokes one instance's lease or every
				// lease of c, or forgets c. Neither may let the fence
				// move before the leases its instances believe in
				// ended; the checks after grants say so.
				next := operatorStep(t, machine, s, op, c, instance, now)
				if !reflect.DeepEqual(s, before) {
					t.Fatalf("step %d: the operator's step changed the state it was given", i/3)
				}
				s = next
				if _, known := s.Clusters[c.UID]; !known {
					delete(highest, c.UID)
				}
			case op%3 != 2:
				// Each declaration names itself by its step; op%3 == 1
				// asks for the lease the process holds to be kept.
				d := presenting(s, Declaration{Cluster: c, Epoch: epoch, Instance: instance, ID: uint64(i/3 + 1)})
				if op%3 == 1 {
					d.KeepLeaseOf = held[p].id
				}
				r, err := machine.Declare(s, d, now)
				if !reflect.DeepEqual(s, before) {
					t.Fatalf("step %d: Declare changed the state it was given", i/3)
				}
				if record, seen := s.Clusters[c.UID]; err != nil && seen && record.Name != c.Name && d.Validate() == nil {
					checkBindingError(t, err, record.Name)
					continue
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
						if !r.State.Holder.Is(other.cluster) && now.Before(until) {
							t.Fatalf("step %d: granted to %s/%q at %s while %s/%q may believe it holds the fence until %s",
								i/3, c.Name, instance, now.Sub(t0), other.cluster.Name, other.instance, until.Sub(t0))
						}
					}
					token++
					r.State.Holder.Token = token
					held[p] = heldLease{d.ID, now}
					believes[p] = now.Add(ttl)
				case Renewed:
					// As the agent does: a kept lease counts from the
					// declaration that got it.
					switch id := r.Answer.Lease.DeclarationID; {
					case id == d.ID:
						held[p] = heldLease{d.ID, now}
					case id != held[p].id || id == 0:
						t.Fatalf("step %d: renewed with the lease of declaration %d, neither %d's nor the kept %d", i/3, id, d.ID, d.KeepLeaseOf)
					}
					believes[p] = held[p].at.Add(ttl)
				default:
					// Told it does not hold the fence, the agent stops
					// acting as holder before it does anything else.
					delete(believes, p)
					delete(held, p)
				}
				if old, next := s.Holder, r.State.Holder; old != nil && next.Token < old.Token {
					t.Fatalf("step %d: token went from %d to %d", i/3, old.Token, next.Token)
				}
				s = r.State
			default:
				rel := Release{ClusterUID: c.UID, Epoch: epoch, Instance: instance}
				r, err := machine.Release(s, rel, now)
				if !reflect.DeepEqual(s, before) {
					t.Fatalf("step %d: Release changed the state it was given", i/3)
				}
				if record, seen := s.Clusters[c.UID]; err != nil && seen && record.Name != c.Name && rel.Validate() == nil {
					checkBindingError(t, err, record.Name)
					continue
				}
				if err != nil {
					if epoch != 0 {
						t.Fatalf("step %d: %+v refused: %v", i/3, rel, err)
					}
					continue
				}
				checkReleased(t, s, r, rel, now)
				if r.Outcome == Released {
					// Whoever releases (the instance's agent, told it is
					// fenced or stopping, or an operator) does so once
					// that instance stopped acting as holder; the
					// release names the cluster by UID only.
					for id := range believes {
						if id.cluster.UID == c.UID && id.instance == instance {
							delete(believes, id)
							delete(held, id)
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

// operatorStep applies an operator's action that op selects to s and
// checks what the machine's answer says against the state.
func operatorStep(t *testing.T, machine Machine, s State, op byte, c Identity, instance string, now time.Time) State {
	t.Helper()
	switch op % 3 {
	case 0, 1:
		r, err := machine.Revoke(s, Revocation{ClusterName: c.Name, Instance: instance, AllInstances: op%3 == 0, By: "operator"}, now)
		if err != nil {
			t.Fatalf("revoke %s: %v", c.Name, err)
		}
		if h := s.Holder; (h == nil || h.Name != c.Name) != (r.Outcome == RevokeNotHolder) {
			t.Fatalf("revoke %s: %s with holder %+v", c.Name, r.Outcome, h)
		}
		if r.Outcome == Revoked && r.State.Holder.Free(At(now)) && !s.Holder.Free(At(now)) {
			t.Fatalf("revoke %s made the holder free at once: a revocation must not shorten a lease", c.Name)
		}
		return r.State
	default:
		r, err := machine.Forget(s, Forgetting{Cluster: c}, now)
		if err != nil {
			t.Fatalf("forget %s: %v", c.Name, err)
		}
		inUse := s.Holder != nil && s.Holder.UID == c.UID || s.Pending != nil && s.Pending.UID == c.UID
		if inUse && r.Outcome == Forgotten {
			t.Fatalf("forgot %s while it holds the fence or is taking it over", c.Name)
		}
		return r.State
	}
}

// checkBindingError checks that err refuses a declaration of a UID under
// another name than bound, the name it is bound to.
func checkBindingError(t *testing.T, err error, bound string) {
	t.Helper()
	var bindingErr *BindingError
	if !errors.As(err, &bindingErr) || bindingErr.Bound != bound {
		t.Fatalf("error %v (%T), want a BindingError naming %q", err, err, bound)
	}
}

package statemachine

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
)

const ttl = 15 * time.Second

var (
	t0    = time.Unix(1_700_000_000, 0)
	east  = Identity{Name: "east", UID: "uid-east"}
	west  = Identity{Name: "west", UID: "uid-west"}
	north = Identity{Name: "north", UID: "uid-north"}
)

// at is t0 moved by d, as stored.
func at(d time.Duration) UnixNano { return At(t0.Add(d)) }

// holding is a holder granted at t0 with token 10, whose one instance ""
// renewed last at renewedAt (its lease ends ttl later).
func holding(c Identity, epoch uint64, renewedAt time.Duration) *Holder {
	return instances(&Holder{Identity: Identity{Name: c.Name, UID: c.UID}, Epoch: epoch, AcquiredAt: at(0), Token: 10},
		map[string]Lease{"": lease(epoch, renewedAt)})
}

// grantedAt is the holder a grant of this kind to instance "" of c makes
// at acquiredAt, before the store gives it a token.
func grantedAt(c Identity, epoch uint64, acquiredAt time.Duration, kind GrantKind) *Holder {
	return instances(&Holder{Identity: Identity{Name: c.Name, UID: c.UID}, Epoch: epoch, AcquiredAt: at(acquiredAt), Grant: kind},
		map[string]Lease{"": lease(epoch, acquiredAt)})
}

// instances gives h these instance leases, and the sums of them.
func instances(h *Holder, leases map[string]Lease) *Holder {
	h.Instances = leases
	h.summarize()
	return h
}

// lease is an instance's lease at epoch, renewed last at renewedAt.
func lease(epoch uint64, renewedAt time.Duration) Lease {
	return Lease{Epoch: epoch, ExpiresAt: at(renewedAt + ttl)}
}

// releasedLease is lease, released.
func releasedLease(epoch uint64, renewedAt time.Duration) Lease {
	l := lease(epoch, renewedAt)
	l.Released = true
	return l
}

// manyLeases is n leases at epoch, renewed at renewedAt, of instances
// pod-0 to pod-(n-1).
func manyLeases(n int, epoch uint64, renewedAt time.Duration) map[string]Lease {
	out := map[string]Lease{}
	for i := range n {
		out[fmt.Sprintf("pod-%d", i)] = lease(epoch, renewedAt)
	}
	return out
}

// withLease sets the lease of one instance in leases.
func withLease(leases map[string]Lease, instance string, l Lease) map[string]Lease {
	leases[instance] = l
	return leases
}

// released marks every instance of h released.
func released(h *Holder) *Holder {
	for name, l := range h.Instances {
		l.Released = true
		h.Instances[name] = l
	}
	h.summarize()
	return h
}

func pendingAt(c Identity, epoch uint64, requestedAt time.Duration) *Pending {
	return &Pending{Identity: Identity{Name: c.Name, UID: c.UID}, Epoch: epoch, RequestedAt: at(requestedAt)}
}

// seen records clusters as having declared their epoch at t0.
func seen(clusters map[Identity]uint64) map[string]Cluster {
	out := map[string]Cluster{}
	for c, epoch := range clusters {
		out[c.UID] = Cluster{Name: c.Name, HighestEpoch: epoch, LastEpoch: epoch, LastDeclaredAt: at(0)}
	}
	return out
}

// bookkeeping leaves out of a comparison the numbers the machine keeps
// for the store, the answered lease and the cluster generations, which
// TestLeaseNumbers, TestKeptLease and TestClusterGeneration check: the
// tests of the fence's rules compare everything else.
var bookkeeping = cmp.Options{
	cmpopts.IgnoreFields(Lease{}, "Seq", "TTL"),
	cmpopts.IgnoreFields(Answer{}, "ClusterGeneration", "Lease"),
	cmpopts.IgnoreFields(Cluster{}, "Generation", "PreviousGeneration", "GenerationAt"),
}

func declare(c Identity, epoch uint64) Declaration {
	return Declaration{Cluster: c, Epoch: epoch}
}

// declareAs is a declaration by one instance of c.
func declareAs(c Identity, epoch uint64, instance string) Declaration {
	return Declaration{Cluster: c, Epoch: epoch, Instance: instance}
}

func TestDeclare(t *testing.T) {
	machine := Machine{LeaseTTL: ttl}
	tests := map[string]struct {
		state State
		decl  Declaration
		now   time.Duration // after t0

		wantErrField string
		// wantLimit expects a *LimitError.
		wantLimit bool
		// wantBound expects a *BindingError naming the cluster the
		// declared UID is bound to.
		wantBound   string
		want        Answer
		wantHolder  *Holder
		wantPending *Pending
		wantEvents  []EventType
		// wantCluster is the declaring cluster's record afterwards; by
		// default it has the declared epoch as last and highest epoch.
		wantCluster *Cluster
	}{
		// Case 1: invalid arguments.
		"1: empty cluster name": {decl: declare(Identity{UID: "u"}, 1), wantErrField: "cluster_name"},
		"1: cluster name not a DNS label": {
			decl: declare(Identity{Name: "West_1", UID: "u"}, 1), wantErrField: "cluster_name",
		},
		"1: cluster name too long": {
			decl: declare(Identity{Name: strings.Repeat("a", 64), UID: "u"}, 1), wantErrField: "cluster_name",
		},
		"1: empty cluster uid":        {decl: declare(Identity{Name: "east"}, 1), wantErrField: "cluster_uid"},
		"1: cluster uid with a space": {decl: declare(Identity{Name: "east", UID: "a b"}, 1), wantErrField: "cluster_uid"},
		"1: cluster uid far too long": {decl: declare(Identity{Name: "east", UID: strings.Repeat("u", 129)}, 1), wantErrField: "cluster_uid"},
		"1: epoch 0":                  {decl: declare(east, 0), wantErrField: "epoch"},
		"1: instance with a space":    {decl: declareAs(east, 1, "pod 1"), wantErrField: "instance"},
		"1: instance far too long":    {decl: declareAs(east, 1, strings.Repeat("p", 254)), wantErrField: "instance"},
		"1: instance not UTF-8":       {decl: declareAs(east, 1, "pod-\xff"), wantErrField: "instance"},
		"1: a pod name is an instance": {
			decl: declareAs(east, 1, "fencegate-6d9f7c5b8-x2x7q"), want: Answer{Outcome: Granted, Grant: GrantFirst},
			wantHolder: instances(&Holder{Identity: east, Epoch: 1, AcquiredAt: at(0), Grant: GrantFirst}, map[string]Lease{"fencegate-6d9f7c5b8-x2x7q": lease(1, 0)}),
			wantEvents: []EventType{HolderChanged},
		},

		// Case 2: the cluster once declared a higher epoch.
		"2: regressed below its highest epoch": {
			state:       State{Holder: holding(west, 9, 0), Clusters: seen(map[Identity]uint64{east: 7, west: 9})},
			decl:        declare(east, 5),
			now:         time.Second,
			want:        Answer{Outcome: Regressed, HighestEpoch: 7},
			wantHolder:  holding(west, 9, 0),
			wantCluster: &Cluster{Name: "east", HighestEpoch: 7, LastEpoch: 5, LastDeclaredAt: at(time.Second)},
		},
		"2: a regressed holder loses its renewal": {
			state:       State{Holder: holding(east, 7, 0), Clusters: seen(map[Identity]uint64{east: 7})},
			decl:        declare(east, 6),
			now:         time.Second,
			want:        Answer{Outcome: Regressed, HighestEpoch: 7},
			wantHolder:  holding(east, 7, 0),
			wantCluster: &Cluster{Name: "east", HighestEpoch: 7, LastEpoch: 6, LastDeclaredAt: at(time.Second)},
		},
		"2: a uid declared under another name is refused, and nothing is recorded": {
			state:     State{Holder: holding(west, 9, 0), Clusters: seen(map[Identity]uint64{east: 7, west: 9})},
			decl:      declare(Identity{Name: "east-restored", UID: east.UID}, 2),
			wantBound: "east",
		},
		"2: another cluster's uid at any epoch is refused": {
			state:     State{Holder: holding(west, 9, 0), Clusters: seen(map[Identity]uint64{east: 7, west: 9})},
			decl:      declare(Identity{Name: "east", UID: west.UID}, 1009),
			wantBound: "west",
		},

		// Case 3: nobody holds the fence yet.
		"3: the first declaration wins": {
			decl:        declare(east, 3),
			now:         time.Second,
			want:        Answer{Outcome: Granted, Grant: GrantFirst},
			wantHolder:  grantedAt(east, 3, time.Second, GrantFirst),
			wantEvents:  []EventType{HolderChanged},
			wantCluster: &Cluster{Name: "east", HighestEpoch: 3, LastEpoch: 3, LastDeclaredAt: at(time.Second)},
		},
		"3: a cluster refused before may be first": {
			state:      State{Clusters: seen(map[Identity]uint64{east: 2})},
			decl:       declare(east, 2),
			want:       Answer{Outcome: Granted, Grant: GrantFirst, HighestEpoch: 2},
			wantHolder: grantedAt(east, 2, 0, GrantFirst),
			wantEvents: []EventType{HolderChanged},
		},

		// Case 4: the holder declares.
		"4: renewal extends the lease from now and keeps the token": {
			state:       State{Holder: holding(east, 3, 0), Clusters: seen(map[Identity]uint64{east: 3})},
			decl:        declare(east, 3),
			now:         5 * time.Second,
			want:        Answer{Outcome: Renewed, HighestEpoch: 3},
			wantHolder:  holding(east, 3, 5*time.Second),
			wantCluster: &Cluster{Name: "east", HighestEpoch: 3, LastEpoch: 3, LastDeclaredAt: at(5 * time.Second)},
		},
		"4: renewal after the lease ended, nobody took over": {
			state:      State{Holder: holding(east, 3, 0), Clusters: seen(map[Identity]uint64{east: 3})},
			decl:       declare(east, 3),
			now:        time.Minute,
			want:       Answer{Outcome: Renewed, HighestEpoch: 3},
			wantHolder: holding(east, 3, time.Minute),
		},
		"4: the holder raises its epoch": {
			state:      State{Holder: holding(east, 3, 0), Clusters: seen(map[Identity]uint64{east: 3})},
			decl:       declare(east, 4),
			want:       Answer{Outcome: Renewed, HighestEpoch: 3},
			wantHolder: holding(east, 4, 0),
		},
		"4: renewal clears a release when nobody waits": {
			state:      State{Holder: released(holding(east, 3, 0)), Clusters: seen(map[Identity]uint64{east: 3})},
			decl:       declare(east, 3),
			now:        time.Second,
			want:       Answer{Outcome: Renewed, HighestEpoch: 3},
			wantHolder: holding(east, 3, time.Second),
		},
		"4: a pending higher epoch fences the holder without renewal": {
			state:       State{Holder: holding(east, 3, 0), Pending: pendingAt(west, 5, 0), Clusters: seen(map[Identity]uint64{east: 3, west: 5})},
			decl:        declare(east, 3),
			now:         time.Second,
			want:        Answer{Outcome: Fenced, FenceReason: TakeoverPending, HighestEpoch: 3},
			wantHolder:  holding(east, 3, 0),
			wantPending: pendingAt(west, 5, 0),
		},
		"4: a released holder stays fenced while a takeover waits": {
			state:       State{Holder: released(holding(east, 3, 0)), Pending: pendingAt(west, 5, 0), Clusters: seen(map[Identity]uint64{east: 3, west: 5})},
			decl:        declare(east, 4),
			want:        Answer{Outcome: Fenced, FenceReason: TakeoverPending, HighestEpoch: 3},
			wantHolder:  released(holding(east, 3, 0)),
			wantPending: pendingAt(west, 5, 0),
			wantCluster: &Cluster{Name: "east", HighestEpoch: 4, LastEpoch: 4, LastDeclaredAt: at(0)},
		},
		"4: the holder at the pending epoch keeps the fence and drops the takeover": {
			state:      State{Holder: holding(east, 3, 0), Pending: pendingAt(west, 5, 0), Clusters: seen(map[Identity]uint64{east: 3, west: 5})},
			decl:       declare(east, 5),
			now:        time.Second,
			want:       Answer{Outcome: Renewed, HighestEpoch: 3},
			wantHolder: holding(east, 5, time.Second),
			wantEvents: []EventType{PendingChanged},
		},
		"4: a second instance gets a lease of its own": {
			state:      State{Holder: instances(holding(east, 3, 0), map[string]Lease{"a": lease(3, 0)}), Clusters: seen(map[Identity]uint64{east: 3})},
			decl:       declareAs(east, 3, "b"),
			now:        5 * time.Second,
			want:       Answer{Outcome: Renewed, HighestEpoch: 3},
			wantHolder: instances(holding(east, 3, 0), map[string]Lease{"a": lease(3, 0), "b": lease(3, 5*time.Second)}),
		},
		"4: renewal by one instance does not extend another's lease": {
			state:      State{Holder: instances(holding(east, 3, 0), map[string]Lease{"a": lease(3, 0), "b": lease(3, 2*time.Second)}), Clusters: seen(map[Identity]uint64{east: 3})},
			decl:       declareAs(east, 3, "b"),
			now:        10 * time.Second,
			want:       Answer{Outcome: Renewed, HighestEpoch: 3},
			wantHolder: instances(holding(east, 3, 0), map[string]Lease{"a": lease(3, 0), "b": lease(3, 10*time.Second)}),
		},
		"4: renewal drops the instances whose lease ended, released or not": {
			state: State{Holder: instances(holding(east, 3, 0), map[string]Lease{
				"gone": lease(3, 0), "left": releasedLease(3, 0), "leaving": releasedLease(3, 10*time.Second), "b": lease(3, 10*time.Second),
			}), Clusters: seen(map[Identity]uint64{east: 3})},
			decl:       declareAs(east, 3, "b"),
			now:        ttl,
			want:       Answer{Outcome: Renewed, HighestEpoch: 3},
			wantHolder: instances(holding(east, 3, 0), map[string]Lease{"leaving": releasedLease(3, 10*time.Second), "b": lease(3, ttl)}),
		},
		"4: renewal clears only the declaring instance's release": {
			state:      State{Holder: released(instances(holding(east, 3, 0), map[string]Lease{"a": lease(3, 0), "b": lease(3, 0)})), Clusters: seen(map[Identity]uint64{east: 3})},
			decl:       declareAs(east, 3, "b"),
			now:        time.Second,
			want:       Answer{Outcome: Renewed, HighestEpoch: 3},
			wantHolder: instances(holding(east, 3, 0), map[string]Lease{"a": releasedLease(3, 0), "b": lease(3, time.Second)}),
		},
		"4: a new instance of the holder while a takeover is pending is fenced, without a lease": {
			state:       State{Holder: instances(holding(east, 3, 0), map[string]Lease{"a": lease(3, 0)}), Pending: pendingAt(west, 5, 0), Clusters: seen(map[Identity]uint64{east: 3, west: 5})},
			decl:        declareAs(east, 3, "b"),
			now:         time.Second,
			want:        Answer{Outcome: Fenced, FenceReason: TakeoverPending, HighestEpoch: 3},
			wantHolder:  instances(holding(east, 3, 0), map[string]Lease{"a": lease(3, 0)}),
			wantPending: pendingAt(west, 5, 0),
		},
		"4: a record stored before instances renews as instance \"\"": {
			state:      State{Holder: &Holder{Identity: east, Epoch: 3, AcquiredAt: at(0), LeaseExpiresAt: at(ttl), Token: 10}, Clusters: seen(map[Identity]uint64{east: 3})},
			decl:       declareAs(east, 3, "a"),
			now:        time.Second,
			want:       Answer{Outcome: Renewed, HighestEpoch: 3},
			wantHolder: instances(holding(east, 3, 0), map[string]Lease{"": lease(3, 0), "a": lease(3, time.Second)}),
		},
		"4: a new instance beyond the bound is refused": {
			state:     State{Holder: instances(holding(east, 3, 0), manyLeases(MaxInstances, 3, time.Second)), Clusters: seen(map[Identity]uint64{east: 3})},
			decl:      declareAs(east, 3, "one-too-many"),
			now:       2 * time.Second,
			wantLimit: true,
		},
		"4: an instance with a lease renews at the bound": {
			state:      State{Holder: instances(holding(east, 3, 0), manyLeases(MaxInstances, 3, time.Second)), Clusters: seen(map[Identity]uint64{east: 3})},
			decl:       declareAs(east, 3, "pod-0"),
			now:        2 * time.Second,
			want:       Answer{Outcome: Renewed, HighestEpoch: 3},
			wantHolder: instances(holding(east, 3, 0), withLease(manyLeases(MaxInstances, 3, time.Second), "pod-0", lease(3, 2*time.Second))),
		},
		"4: instances whose lease ended do not count against the bound": {
			state:      State{Holder: instances(holding(east, 3, 0), manyLeases(MaxInstances, 3, 0)), Clusters: seen(map[Identity]uint64{east: 3})},
			decl:       declareAs(east, 3, "pod-new"),
			now:        ttl,
			want:       Answer{Outcome: Renewed, HighestEpoch: 3},
			wantHolder: instances(holding(east, 3, 0), map[string]Lease{"pod-new": lease(3, ttl)}),
		},
		"4: the holder's uid under another name is refused": {
			state:     State{Holder: holding(east, 3, 0), Clusters: seen(map[Identity]uint64{east: 3})},
			decl:      declare(Identity{Name: "east2", UID: east.UID}, 3),
			wantBound: "east",
		},

		// Case 5: another cluster holds the fence at or above the epoch.
		"5: lower epoch than the holder's": {
			state:      State{Holder: holding(east, 7, 0), Clusters: seen(map[Identity]uint64{east: 7})},
			decl:       declare(west, 3),
			want:       Answer{Outcome: Fenced, FenceReason: HeldByOther},
			wantHolder: holding(east, 7, 0),
		},
		"5: equal epoch is fenced": {
			state:      State{Holder: holding(east, 7, 0), Clusters: seen(map[Identity]uint64{east: 7})},
			decl:       declare(west, 7),
			want:       Answer{Outcome: Fenced, FenceReason: HeldByOther},
			wantHolder: holding(east, 7, 0),
		},
		"5: equal epoch is fenced after the holder's lease ended": {
			state:      State{Holder: holding(east, 7, 0), Clusters: seen(map[Identity]uint64{east: 7})},
			decl:       declare(west, 7),
			now:        time.Hour,
			want:       Answer{Outcome: Fenced, FenceReason: HeldByOther},
			wantHolder: holding(east, 7, 0),
		},
		"5: equal epoch is fenced after the holder released": {
			state:      State{Holder: released(holding(east, 7, 0)), Clusters: seen(map[Identity]uint64{east: 7})},
			decl:       declare(west, 7),
			want:       Answer{Outcome: Fenced, FenceReason: HeldByOther},
			wantHolder: released(holding(east, 7, 0)),
		},
		"5: a third cluster's higher pending takeover": {
			state:       State{Holder: holding(east, 3, 0), Pending: pendingAt(west, 6, 0), Clusters: seen(map[Identity]uint64{east: 3, west: 6})},
			decl:        declare(north, 5),
			now:         time.Hour,
			want:        Answer{Outcome: Fenced, FenceReason: OtherTakeoverPending},
			wantHolder:  holding(east, 3, 0),
			wantPending: pendingAt(west, 6, 0),
		},
		"5: a third cluster's pending takeover at the same epoch": {
			state:       State{Holder: holding(east, 3, 0), Pending: pendingAt(west, 6, 0), Clusters: seen(map[Identity]uint64{east: 3, west: 6})},
			decl:        declare(north, 6),
			want:        Answer{Outcome: Fenced, FenceReason: OtherTakeoverPending},
			wantHolder:  holding(east, 3, 0),
			wantPending: pendingAt(west, 6, 0),
		},

		// Case 6: a higher epoch than the holder's.
		"6: the holder's lease runs: the takeover waits": {
			state:       State{Holder: holding(east, 3, 0), Clusters: seen(map[Identity]uint64{east: 3})},
			decl:        declare(west, 5),
			now:         4 * time.Second,
			want:        Answer{Outcome: Acquiring, RetryAfter: ttl - 4*time.Second},
			wantHolder:  holding(east, 3, 0),
			wantPending: pendingAt(west, 5, 4*time.Second),
			wantEvents:  []EventType{PendingChanged},
		},
		"6: one nanosecond before the lease ends it still waits": {
			state:       State{Holder: holding(east, 3, 0), Clusters: seen(map[Identity]uint64{east: 3})},
			decl:        declare(west, 5),
			now:         ttl - time.Nanosecond,
			want:        Answer{Outcome: Acquiring, RetryAfter: time.Nanosecond},
			wantHolder:  holding(east, 3, 0),
			wantPending: pendingAt(west, 5, ttl-time.Nanosecond),
			wantEvents:  []EventType{PendingChanged},
		},
		"6: asking again keeps the first request time": {
			state:       State{Holder: holding(east, 3, 0), Pending: pendingAt(west, 5, time.Second), Clusters: seen(map[Identity]uint64{east: 3, west: 5})},
			decl:        declare(west, 5),
			now:         10 * time.Second,
			want:        Answer{Outcome: Acquiring, RetryAfter: 5 * time.Second, HighestEpoch: 5},
			wantHolder:  holding(east, 3, 0),
			wantPending: pendingAt(west, 5, time.Second),
		},
		"6: the pending cluster raises its epoch": {
			state:       State{Holder: holding(east, 3, 0), Pending: pendingAt(west, 5, time.Second), Clusters: seen(map[Identity]uint64{east: 3, west: 5})},
			decl:        declare(west, 6),
			now:         2 * time.Second,
			want:        Answer{Outcome: Acquiring, RetryAfter: 13 * time.Second, HighestEpoch: 5},
			wantHolder:  holding(east, 3, 0),
			wantPending: pendingAt(west, 6, time.Second),
			wantEvents:  []EventType{PendingChanged},
		},
		"6: a higher third cluster displaces the pending takeover": {
			state:       State{Holder: holding(east, 3, 0), Pending: pendingAt(west, 5, 0), Clusters: seen(map[Identity]uint64{east: 3, west: 5})},
			decl:        declare(north, 8),
			now:         time.Second,
			want:        Answer{Outcome: Acquiring, RetryAfter: 14 * time.Second},
			wantHolder:  holding(east, 3, 0),
			wantPending: pendingAt(north, 8, time.Second),
			wantEvents:  []EventType{PendingChanged},
		},
		"6: the holder released: granted at once": {
			state:      State{Holder: released(holding(east, 3, 0)), Pending: pendingAt(west, 5, 0), Clusters: seen(map[Identity]uint64{east: 3, west: 5})},
			decl:       declare(west, 5),
			now:        time.Second,
			want:       Answer{Outcome: Granted, Grant: GrantAfterRelease, Previous: released(holding(east, 3, 0)), HighestEpoch: 5},
			wantHolder: grantedAt(west, 5, time.Second, GrantAfterRelease),
			wantEvents: []EventType{HolderChanged, PendingChanged},
		},
		"6: the holder's lease ended exactly now: granted": {
			state:      State{Holder: holding(east, 3, 0), Pending: pendingAt(west, 5, 0), Clusters: seen(map[Identity]uint64{east: 3, west: 5})},
			decl:       declare(west, 5),
			now:        ttl,
			want:       Answer{Outcome: Granted, Grant: GrantAfterExpiry, Previous: holding(east, 3, 0), HighestEpoch: 5},
			wantHolder: grantedAt(west, 5, ttl, GrantAfterExpiry),
			wantEvents: []EventType{HolderChanged, PendingChanged},
		},
		"6: lease ended without a pending takeover: granted": {
			state:      State{Holder: holding(east, 3, 0), Clusters: seen(map[Identity]uint64{east: 3})},
			decl:       declare(west, 4),
			now:        time.Minute,
			want:       Answer{Outcome: Granted, Grant: GrantAfterExpiry, Previous: holding(east, 3, 0)},
			wantHolder: grantedAt(west, 4, time.Minute, GrantAfterExpiry),
			wantEvents: []EventType{HolderChanged},
		},
		"6: one instance released, another's lease runs: the takeover waits for it": {
			state:       State{Holder: instances(holding(east, 3, 0), map[string]Lease{"a": releasedLease(3, 0), "b": lease(3, 2*time.Second)}), Clusters: seen(map[Identity]uint64{east: 3})},
			decl:        declare(west, 5),
			now:         4 * time.Second,
			want:        Answer{Outcome: Acquiring, RetryAfter: ttl - 2*time.Second},
			wantHolder:  instances(holding(east, 3, 0), map[string]Lease{"a": releasedLease(3, 0), "b": lease(3, 2*time.Second)}),
			wantPending: pendingAt(west, 5, 4*time.Second),
			wantEvents:  []EventType{PendingChanged},
		},
		"6: the wait is for the last lease that is not released": {
			state:       State{Holder: instances(holding(east, 3, 0), map[string]Lease{"a": lease(3, 0), "b": lease(3, 3*time.Second), "c": releasedLease(3, 9*time.Second)}), Clusters: seen(map[Identity]uint64{east: 3})},
			decl:        declare(west, 5),
			now:         4 * time.Second,
			want:        Answer{Outcome: Acquiring, RetryAfter: ttl - time.Second},
			wantHolder:  instances(holding(east, 3, 0), map[string]Lease{"a": lease(3, 0), "b": lease(3, 3*time.Second), "c": releasedLease(3, 9*time.Second)}),
			wantPending: pendingAt(west, 5, 4*time.Second),
			wantEvents:  []EventType{PendingChanged},
		},
		"6: every instance released: granted at once": {
			state:      State{Holder: released(instances(holding(east, 3, 0), map[string]Lease{"a": lease(3, 0), "b": lease(3, 2*time.Second)})), Pending: pendingAt(west, 5, 0), Clusters: seen(map[Identity]uint64{east: 3, west: 5})},
			decl:       declare(west, 5),
			now:        3 * time.Second,
			want:       Answer{Outcome: Granted, Grant: GrantAfterRelease, Previous: released(instances(holding(east, 3, 0), map[string]Lease{"a": lease(3, 0), "b": lease(3, 2*time.Second)})), HighestEpoch: 5},
			wantHolder: grantedAt(west, 5, 3*time.Second, GrantAfterRelease),
			wantEvents: []EventType{HolderChanged, PendingChanged},
		},
		"6: one instance released, the other's lease ended exactly now: granted": {
			state:      State{Holder: instances(holding(east, 3, 0), map[string]Lease{"a": releasedLease(3, 0), "b": lease(3, 2*time.Second)}), Pending: pendingAt(west, 5, 0), Clusters: seen(map[Identity]uint64{east: 3, west: 5})},
			decl:       declare(west, 5),
			now:        ttl + 2*time.Second,
			want:       Answer{Outcome: Granted, Grant: GrantAfterExpiry, Previous: instances(holding(east, 3, 0), map[string]Lease{"a": releasedLease(3, 0), "b": lease(3, 2*time.Second)}), HighestEpoch: 5},
			wantHolder: grantedAt(west, 5, ttl+2*time.Second, GrantAfterExpiry),
			wantEvents: []EventType{HolderChanged, PendingChanged},
		},
		"6: a higher third cluster wins over a lower pending one once the lease ended": {
			state:      State{Holder: holding(east, 3, 0), Pending: pendingAt(west, 5, 0), Clusters: seen(map[Identity]uint64{east: 3, west: 5})},
			decl:       declare(north, 6),
			now:        time.Minute,
			want:       Answer{Outcome: Granted, Grant: GrantAfterExpiry, Previous: holding(east, 3, 0)},
			wantHolder: grantedAt(north, 6, time.Minute, GrantAfterExpiry),
			wantEvents: []EventType{HolderChanged, PendingChanged},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			before := tc.state.Clone()
			got, err := machine.Declare(tc.state, tc.decl, t0.Add(tc.now))
			if diff := cmp.Diff(before, tc.state); diff != "" {
				t.Errorf("Declare changed its input state (-before +after):\n%s", diff)
			}
			if tc.wantLimit {
				var limitErr *LimitError
				if !errors.As(err, &limitErr) || !strings.Contains(limitErr.Error(), "running lease") {
					t.Fatalf("error = %v, want a LimitError", err)
				}
				return
			}
			if tc.wantBound != "" {
				var bindingErr *BindingError
				if !errors.As(err, &bindingErr) || bindingErr.Bound != tc.wantBound {
					t.Fatalf("error = %v, want a BindingError naming %s", err, tc.wantBound)
				}
				return
			}
			if tc.wantErrField != "" {
				var fieldErr *rpctypes.FieldError
				if !errors.As(err, &fieldErr) || fieldErr.Field != tc.wantErrField {
					t.Fatalf("error = %v, want a FieldError for %s", err, tc.wantErrField)
				}
				return
			}
			if err != nil {
				t.Fatalf("Declare: %v", err)
			}
			if diff := cmp.Diff(tc.want, got.Answer, bookkeeping); diff != "" {
				t.Errorf("answer (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantHolder, got.State.Holder, bookkeeping); diff != "" {
				t.Errorf("holder (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantPending, got.State.Pending); diff != "" {
				t.Errorf("pending (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantEvents, got.Events); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			wantCluster := Cluster{Name: tc.decl.Cluster.Name, HighestEpoch: tc.decl.Epoch, LastEpoch: tc.decl.Epoch, LastDeclaredAt: at(tc.now)}
			if tc.wantCluster != nil {
				wantCluster = *tc.wantCluster
			}
			if diff := cmp.Diff(wantCluster, got.State.Clusters[tc.decl.Cluster.UID], bookkeeping); diff != "" {
				t.Errorf("record of the declaring cluster (-want +got):\n%s", diff)
			}
			for uid, c := range tc.state.Clusters {
				if uid != tc.decl.Cluster.UID && got.State.Clusters[uid] != c {
					t.Errorf("record of cluster %s changed: %+v, then %+v", uid, c, got.State.Clusters[uid])
				}
			}
		})
	}
}

func TestRelease(t *testing.T) {
	machine := Machine{LeaseTTL: ttl}
	tests := map[string]struct {
		state        State
		release      Release
		now          time.Duration // after t0
		wantErrField string
		want         ReleaseOutcome
		wantHolder   *Holder
		wantEvents   []EventType
	}{
		"the holder releases": {
			state:      State{Holder: holding(east, 3, 0), Pending: pendingAt(west, 5, 0)},
			release:    Release{ClusterUID: east.UID, Epoch: 3},
			want:       Released,
			wantHolder: released(holding(east, 3, 0)),
			wantEvents: []EventType{HolderReleased},
		},
		"a higher epoch may release": {
			state:      State{Holder: holding(east, 3, 0)},
			release:    Release{ClusterUID: east.UID, Epoch: 9},
			want:       Released,
			wantHolder: released(holding(east, 3, 0)),
			wantEvents: []EventType{HolderReleased},
		},
		"releasing twice changes nothing": {
			state:      State{Holder: released(holding(east, 3, 0))},
			release:    Release{ClusterUID: east.UID, Epoch: 3},
			want:       AlreadyReleased,
			wantHolder: released(holding(east, 3, 0)),
		},
		"another cluster cannot release": {
			state:      State{Holder: holding(east, 3, 0)},
			release:    Release{ClusterUID: west.UID, Epoch: 9},
			want:       NotHolder,
			wantHolder: holding(east, 3, 0),
		},
		"nobody holds the fence": {
			release: Release{ClusterUID: east.UID, Epoch: 1},
			want:    NotHolder,
		},
		"a lower epoch than the holder's cannot release": {
			state:      State{Holder: holding(east, 3, 0)},
			release:    Release{ClusterUID: east.UID, Epoch: 2},
			want:       ReleaseRegressed,
			wantHolder: holding(east, 3, 0),
		},
		"one of two instances releases: the holder is not released": {
			state:      State{Holder: instances(holding(east, 3, 0), map[string]Lease{"a": lease(3, 0), "b": lease(3, time.Second)}), Pending: pendingAt(west, 5, 0)},
			release:    Release{ClusterUID: east.UID, Epoch: 3, Instance: "a"},
			now:        2 * time.Second,
			want:       Released,
			wantHolder: instances(holding(east, 3, 0), map[string]Lease{"a": releasedLease(3, 0), "b": lease(3, time.Second)}),
		},
		"the last instance releases: the holder is released": {
			state:      State{Holder: instances(holding(east, 3, 0), map[string]Lease{"a": releasedLease(3, 0), "b": lease(3, time.Second)}), Pending: pendingAt(west, 5, 0)},
			release:    Release{ClusterUID: east.UID, Epoch: 3, Instance: "b"},
			now:        2 * time.Second,
			want:       Released,
			wantHolder: released(instances(holding(east, 3, 0), map[string]Lease{"a": lease(3, 0), "b": lease(3, time.Second)})),
			wantEvents: []EventType{HolderReleased},
		},
		"a release while the other instance's lease ended: that one is dropped and the holder is released": {
			state:      State{Holder: instances(holding(east, 3, 0), map[string]Lease{"a": lease(3, 0), "b": lease(3, 5*time.Second)}), Pending: pendingAt(west, 5, 0)},
			release:    Release{ClusterUID: east.UID, Epoch: 3, Instance: "b"},
			now:        ttl,
			want:       Released,
			wantHolder: released(instances(holding(east, 3, 0), map[string]Lease{"b": lease(3, 5*time.Second)})),
			wantEvents: []EventType{HolderReleased},
		},
		"an old pod of a rollout releases at the epoch it declared": {
			state:      State{Holder: instances(holding(east, 4, 0), map[string]Lease{"old": lease(3, 0), "new": lease(4, time.Second)})},
			release:    Release{ClusterUID: east.UID, Epoch: 3, Instance: "old"},
			now:        2 * time.Second,
			want:       Released,
			wantHolder: instances(holding(east, 4, 0), map[string]Lease{"old": releasedLease(3, 0), "new": lease(4, time.Second)}),
		},
		"an instance cannot release below the epoch it declared": {
			state:      State{Holder: instances(holding(east, 4, 0), map[string]Lease{"old": lease(3, 0), "new": lease(4, time.Second)})},
			release:    Release{ClusterUID: east.UID, Epoch: 3, Instance: "new"},
			want:       ReleaseRegressed,
			wantHolder: instances(holding(east, 4, 0), map[string]Lease{"old": lease(3, 0), "new": lease(4, time.Second)}),
		},
		"an instance without a lease: nothing changes": {
			state:      State{Holder: instances(holding(east, 3, 0), map[string]Lease{"a": lease(3, 0)}), Pending: pendingAt(west, 5, 0)},
			release:    Release{ClusterUID: east.UID, Epoch: 3, Instance: "b"},
			want:       NoLease,
			wantHolder: instances(holding(east, 3, 0), map[string]Lease{"a": lease(3, 0)}),
		},
		"an instance whose lease ended: nothing changes": {
			state:      State{Holder: instances(holding(east, 3, 0), map[string]Lease{"a": lease(3, 0), "b": lease(3, 10*time.Second)})},
			release:    Release{ClusterUID: east.UID, Epoch: 3, Instance: "a"},
			now:        ttl,
			want:       NoLease,
			wantHolder: instances(holding(east, 3, 0), map[string]Lease{"a": lease(3, 0), "b": lease(3, 10*time.Second)}),
		},
		"a record stored before instances is released by instance \"\"": {
			state:      State{Holder: &Holder{Identity: east, Epoch: 3, AcquiredAt: at(0), LeaseExpiresAt: at(ttl), Token: 10}},
			release:    Release{ClusterUID: east.UID, Epoch: 3},
			want:       Released,
			wantHolder: released(holding(east, 3, 0)),
			wantEvents: []EventType{HolderReleased},
		},
		"empty uid":    {release: Release{Epoch: 1}, wantErrField: "cluster_uid"},
		"epoch 0":      {release: Release{ClusterUID: "u"}, wantErrField: "epoch"},
		"bad instance": {release: Release{ClusterUID: "u", Epoch: 1, Instance: "a\tb"}, wantErrField: "instance"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			before := tc.state.Clone()
			got, err := machine.Release(tc.state, tc.release, t0.Add(tc.now))
			if diff := cmp.Diff(before, tc.state); diff != "" {
				t.Errorf("Release changed its input state (-before +after):\n%s", diff)
			}
			if tc.wantErrField != "" {
				var fieldErr *rpctypes.FieldError
				if !errors.As(err, &fieldErr) || fieldErr.Field != tc.wantErrField {
					t.Fatalf("error = %v, want a FieldError for %s", err, tc.wantErrField)
				}
				return
			}
			if err != nil {
				t.Fatalf("Release: %v", err)
			}
			if got.Outcome != tc.want {
				t.Errorf("outcome = %s, want %s", got.Outcome, tc.want)
			}
			if diff := cmp.Diff(tc.wantHolder, got.State.Holder, bookkeeping); diff != "" {
				t.Errorf("holder (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.state.Pending, got.State.Pending); diff != "" {
				t.Errorf("a release changed the pending takeover (-before +after):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantEvents, got.Events); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

// presenting is d from a current process of its cluster: it presents the
// cluster's current generation in s.
func presenting(s State, d Declaration) Declaration {
	d.Generation = s.Clusters[d.Cluster.UID].Generation
	return d
}

// TestDeclarationThatChangesNothing: a declaration that changes nothing but
// the time its cluster was seen, which is younger than the resolution,
// leaves the state as it was, so that the store answers it without a
// write; every other one changes it.
func TestDeclarationThatChangesNothing(t *testing.T) {
	machine := Machine{LeaseTTL: ttl}
	// east holds the fence at epoch 3; west stands by at 2. Both present
	// generation 1, issued at t0, so no generation is due to move on.
	base := func() State {
		clusters := seen(map[Identity]uint64{east: 3, west: 2})
		for uid, c := range clusters {
			c.Generation, c.GenerationAt, c.PresentsGeneration = 1, at(0), true
			clusters[uid] = c
		}
		return State{Holder: holding(east, 3, 0), Clusters: clusters, LastGeneration: 1}
	}
	pendingWest := base()
	pendingWest.Pending = pendingAt(west, 4, 0)
	pendingWest.Clusters[west.UID] = Cluster{Name: west.Name, HighestEpoch: 4, LastEpoch: 4, LastDeclaredAt: at(0), Generation: 1, GenerationAt: at(0), PresentsGeneration: true}
	generationDue := base()
	due := generationDue.Clusters[west.UID]
	due.GenerationAt = at(-DefaultGenerationPeriod)
	generationDue.Clusters[west.UID] = due
	// A holder stored before instances had leases of their own.
	legacy := base()
	legacy.Holder = &Holder{Identity: east, Epoch: 3, AcquiredAt: at(0), LeaseExpiresAt: at(ttl), Token: 10}
	tests := map[string]struct {
		state State
		decl  Declaration
		now   time.Duration

		wantOutcome        Outcome
		wantChanged        bool
		wantLastDeclaredAt time.Duration
	}{
		"a standby, within the resolution": {
			state: base(), decl: declare(west, 2), now: time.Second,
			wantOutcome: Fenced, wantLastDeclaredAt: 0,
		},
		"a standby, just before the resolution": {
			state: base(), decl: declare(west, 2), now: DefaultDeclaredAtResolution - time.Nanosecond,
			wantOutcome: Fenced, wantLastDeclaredAt: 0,
		},
		"a standby, once its last declaration is as old as the resolution": {
			state: base(), decl: declare(west, 2), now: DefaultDeclaredAtResolution,
			wantOutcome: Fenced, wantChanged: true, wantLastDeclaredAt: DefaultDeclaredAtResolution,
		},
		"a standby, after the authority's clock was stepped back": {
			state: base(), decl: declare(west, 2), now: -time.Second,
			wantOutcome: Fenced, wantChanged: true, wantLastDeclaredAt: -time.Second,
		},
		"a standby that declares a lower epoch than before": {
			state: base(), decl: declare(west, 1), now: time.Second,
			wantOutcome: Regressed, wantChanged: true, wantLastDeclaredAt: time.Second,
		},
		"a standby that raises its epoch": {
			state: base(), decl: declare(west, 4), now: time.Second,
			wantOutcome: Acquiring, wantChanged: true, wantLastDeclaredAt: time.Second,
		},
		"a pending takeover, repeated": {
			state: pendingWest, decl: declare(west, 4), now: time.Second,
			wantOutcome: Acquiring, wantLastDeclaredAt: 0,
		},
		"a standby whose generation is due to move on": {
			state: generationDue, decl: declare(west, 2), now: time.Second,
			wantOutcome: Fenced, wantChanged: true, wantLastDeclaredAt: time.Second,
		},
		"a standby, in a record whose holder has no instances yet": {
			state: legacy, decl: declare(west, 2), now: time.Second,
			wantOutcome: Fenced, wantChanged: true, wantLastDeclaredAt: time.Second,
		},
		"the holder, which renews its lease": {
			state: base(), decl: declare(east, 3), now: time.Second,
			wantOutcome: Renewed, wantChanged: true, wantLastDeclaredAt: time.Second,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tc.decl.Generation = 1
			r, err := machine.Declare(tc.state, tc.decl, t0.Add(tc.now))
			if err != nil {
				t.Fatal(err)
			}
			if r.Answer.Outcome != tc.wantOutcome || r.Changed != tc.wantChanged {
				t.Errorf("outcome %s, changed %v; want %s, changed %v", r.Answer.Outcome, r.Changed, tc.wantOutcome, tc.wantChanged)
			}
			if got := r.State.Clusters[tc.decl.Cluster.UID].LastDeclaredAt; got != at(tc.wantLastDeclaredAt) {
				t.Errorf("last declared at %s after t0, want %s", got.Time().Sub(t0), tc.wantLastDeclaredAt)
			}
			if !r.Changed {
				if diff := cmp.Diff(tc.state, r.State); diff != "" {
					t.Errorf("a declaration that changed nothing changed the state (-was +now):\n%s", diff)
				}
			}
		})
	}
}

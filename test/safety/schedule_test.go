package safety

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/fencegate/fencegate/internal/tcpproxy"
)

// Timing of a history: a short lease and short intervals, so that the
// fence can change hands several times in a few seconds.
const (
	leaseTTL        = 2 * time.Second
	declareInterval = 400 * time.Millisecond
	declareTimeout  = 300 * time.Millisecond
	leaseMargin     = 300 * time.Millisecond
	// quickDeclareInterval and quickDeclareTimeout are the agents' of
	// half the histories: they declare more often than a third of the
	// lease's usable part, so that the holders keep their running leases
	// between renewals (fenceagent.KeepsLease).
	quickDeclareInterval = 200 * time.Millisecond
	quickDeclareTimeout  = 180 * time.Millisecond
	// chaos is the span over which a schedule's steps are spread; a
	// history ends shortly after its last step.
	chaos = 2500 * time.Millisecond
	// tail lets the last steps play out before everything stops.
	tail = 400 * time.Millisecond
	// generationPeriod is how often the authority moves a declaring
	// cluster's generation on: short, so that a backup is told apart
	// within a history, and longer than a declare interval, so that a
	// process that declares on time never falls two generations behind.
	generationPeriod = 500 * time.Millisecond
	// overtime bounds how long a test that waits for an outcome plays on
	// past its schedule's end (run.awaited).
	overtime = 30 * time.Second
	// labReplicas is how many replicas of the authority serve the
	// histories with the clock nemesis.
	labReplicas = 3
)

// nemeses are the faults a schedule draws beyond raises, partitions,
// restarts and operators.
type nemeses struct {
	// clocks sets the replicas' wall clocks apart and steps them.
	clocks bool
	// restores starts copies of clusters restored from their backups.
	restores bool
}

// clusterNames are the clusters of every history.
var clusterNames = []string{"east", "west", "north"}

// stepKind is what a step of a schedule does.
type stepKind int

const (
	// raise rolls a cluster out with a new epoch of one domain.
	raise stepKind = iota + 1
	// partition cuts one agent from the authority for a while.
	partition
	// restart restarts the authority on the same address and data.
	restart
	// operate is an operator's action or a hostile caller's (see
	// operatorAction).
	operate
	// clockStep steps one replica's wall clock forward.
	clockStep
	// restore backs a cluster up and, once the authority moved its
	// generation on twice, starts a copy of it from the backup.
	restore
	// failover raises the epoch a cluster's running pods declare for one
	// domain, without a restart, as the Fence's spec.epoch does once
	// fencegate failover patched it.
	failover
	// leaseFail makes the membership Lease writes of the cluster holding
	// the domain fail for length, and fails the domain over away from it.
	leaseFail
	// brokenPolicy reloads the hold policy of the cluster holding the
	// domain broken, fails the domain over away from it, and mends the
	// policy after length.
	brokenPolicy
	// relabel moves the moving namespace to another domain.
	relabel
	// failback fails the domain over to another cluster and, length after
	// that one held it, back.
	failback
)

// scenario is what a history is shaped to reach besides its random steps:
// each nemesis's case in a fair share of histories. A history's scenario
// is its seed modulo scenarios, so that a replayed seed plays it again.
type scenario uint64

const (
	plainScenario scenario = iota
	leaseScenario
	policyScenario
	failbackScenario
	copyScenario
	scenarios
)

var scenarioNames = map[scenario]string{
	plainScenario: "random steps only", leaseScenario: "a holder whose Lease writes fail",
	policyScenario: "a hold policy reloaded broken", failbackScenario: "a failover and back",
	copyScenario: "a failover to a restored copy",
}

// operatorAction is what an operate step does.
type operatorAction int

const (
	// revokeCluster revokes every lease of a cluster.
	revokeCluster operatorAction = iota
	// revokePod revokes the lease of one pod.
	revokePod
	// forget makes the authority forget a cluster.
	forget
	// foreignRelease releases a pod's lease as an operator, as another
	// cluster and as an unbound caller: each must be refused.
	foreignRelease
	// foreignDeclare declares as a cluster as another cluster and as an
	// unbound caller: each must be refused.
	foreignDeclare
	// outOfStep declares, as a cluster of its own, an epoch far above every
	// other: refused, and nothing recorded.
	outOfStep
	operatorActions
)

var operatorActionNames = map[operatorAction]string{
	revokeCluster: "revoke every lease of", revokePod: "revoke the lease of a pod of", forget: "forget",
	foreignRelease: "release as someone else a pod's lease of", foreignDeclare: "declare as someone else as",
	outOfStep: "declare an epoch out of step beside",
}

// step is one thing a schedule does at its time.
type step struct {
	at   time.Duration
	kind stepKind
	// cluster is the cluster raised or partitioned (an index of
	// clusterNames), replica the pod slot partitioned.
	cluster, replica int
	// domain is the fence domain (an index of the run's domains) raised,
	// failed over or operated on.
	domain int
	// epoch is the raised epoch; for a restore, the epoch an operator
	// fails over to the restored copy at (0: the copy keeps the backup's).
	epoch uint64
	// preStop is how long the replaced pods go on with their agents after
	// the new pods are up, drain how long they answer admission after
	// their agents stopped: a rollout's old pods keep serving while they
	// terminate.
	preStop, drain time.Duration
	// mode and length describe a partition; length is a clock step's
	// jump too, and replica the authority replica it steps.
	mode   tcpproxy.Mode
	length time.Duration
	// action is what an operate step does, to cluster (and replica).
	action operatorAction
	// awaits, when set, holds the step past its time until it says so
	// (for at most overtime): a scripted step that needs an earlier one's
	// outcome, which a loaded machine delays.
	awaits func() bool
}

func (s step) String() string {
	name := clusterNames[s.cluster]
	switch s.kind {
	case raise:
		return fmt.Sprintf("raise %s to epoch %d in domain %d (old pods: preStop %s, drain %s)", name, s.epoch, s.domain, s.preStop, s.drain)
	case failover:
		return fmt.Sprintf("fail domain %d over to %s at epoch %d, in place", s.domain, name, s.epoch)
	case partition:
		return fmt.Sprintf("partition %s replica %d (%s) for %s", name, s.replica, s.mode, s.length)
	case operate:
		return fmt.Sprintf("%s %s in domain %d (replica %d)", operatorActionNames[s.action], name, s.domain, s.replica)
	case clockStep:
		return fmt.Sprintf("step the wall clock of authority replica %d forward by %s", s.replica, s.length)
	case leaseFail:
		return fmt.Sprintf("the Lease writes of the holder of domain %d fail for %s, and the domain fails over away from it", s.domain, s.length)
	case brokenPolicy:
		return fmt.Sprintf("the hold policy of the holder of domain %d is reloaded broken for %s, and the domain fails over away from it", s.domain, s.length)
	case relabel:
		return "relabel namespace ns-moving to another domain"
	case failback:
		return fmt.Sprintf("fail domain %d over to another cluster and, %s after it held it, back", s.domain, s.length)
	case restore:
		if s.epoch > 0 {
			return fmt.Sprintf("back %s up, restore a copy of it beside it, and fail domain %d over to the copy at epoch %d", name, s.domain, s.epoch)
		}
		return fmt.Sprintf("back %s up, and restore a copy of it beside it", name)
	default:
		return "restart the authority"
	}
}

// schedule is a history's plan, all drawn from its seed: the same seed
// plans the same history (the machine's timing still varies).
type schedule struct {
	seed uint64
	// replicas is the number of pods per cluster.
	replicas int
	// domains is the number of fence domains every pod serves.
	domains int
	// epochs are the clusters' first epochs in the first domain; the
	// others start rotated (see firstEpoch), so that their first holders
	// differ.
	epochs []uint64
	// uids are the clusters' kube-system UIDs.
	uids  []string
	steps []step
	// end is when the history stops: everything is stopped then.
	end time.Duration
	// offsets are the authority replicas' first wall clock offsets; nil
	// leaves them at the real time.
	offsets []time.Duration
	// quick makes the agents declare every quickDeclareInterval.
	quick bool
	// scenario is what the history is shaped to reach.
	scenario scenario
}

// declareInterval and declareTimeout are the agents' of the history.
func (s schedule) declareInterval() time.Duration {
	if s.quick {
		return quickDeclareInterval
	}
	return declareInterval
}

func (s schedule) declareTimeout() time.Duration {
	if s.quick {
		return quickDeclareTimeout
	}
	return declareTimeout
}

// maxDomains bounds the fence domains a history's pods serve.
const maxDomains = 3

// firstEpoch is the epoch cluster c's first pods declare in domain d.
func (s schedule) firstEpoch(c, d int) uint64 { return s.epochs[(c+d)%len(s.epochs)] }

// plan draws a schedule from seed with the nemeses n. Each cluster runs
// replicas pods; 0 draws one or two (the chart's default) from the seed as
// well. Each history serves one to maxDomains fence domains, and each raise
// or failover moves one of them.
func plan(seed uint64, replicas int, n nemeses) schedule {
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	if replicas == 0 {
		replicas = 1 + rng.IntN(2)
	}
	s := schedule{seed: seed, replicas: replicas, domains: 1 + rng.IntN(maxDomains), end: chaos + tail}
	if n.clocks {
		s.offsets = drawOffsets(rng, labReplicas)
	}
	for _, name := range clusterNames {
		s.epochs = append(s.epochs, 1+rng.Uint64N(2))
		s.uids = append(s.uids, fmt.Sprintf("%s-%08x-%04x", name, rng.Uint32(), rng.Uint32N(1<<16)))
	}
	// epochs and highest follow each domain's epochs along the steps.
	epochs := make([][]uint64, len(clusterNames))
	highest := make([]uint64, s.domains)
	for c := range epochs {
		for d := range s.domains {
			epochs[c] = append(epochs[c], s.firstEpoch(c, d))
			highest[d] = max(highest[d], epochs[c][d])
		}
	}
	at := time.Duration(0)
	for {
		at += 250*time.Millisecond + upTo(rng, 650*time.Millisecond)
		if at > chaos {
			break
		}
		st := step{at: at, cluster: rng.IntN(len(clusterNames)), domain: rng.IntN(s.domains)}
		d := st.domain
		p := rng.IntN(24)
		for p >= 20 && p < 22 && !n.clocks || p >= 22 && !n.restores {
			p = rng.IntN(24)
		}
		switch {
		case p < 9:
			st.kind = raise
			if rng.IntN(4) > 0 {
				// A failover: above every epoch declared so far.
				highest[d]++
				epochs[st.cluster][d] = highest[d]
			} else {
				// A raise that may stay below the holder's.
				epochs[st.cluster][d]++
				highest[d] = max(highest[d], epochs[st.cluster][d])
			}
			st.epoch = epochs[st.cluster][d]
			if rng.IntN(2) == 0 {
				// Half of them in place, as fencegate failover does.
				st.kind = failover
				break
			}
			st.preStop = upTo(rng, 600*time.Millisecond)
			st.drain = upTo(rng, 300*time.Millisecond)
		case p < 15:
			st.kind = partition
			st.replica = rng.IntN(s.replicas)
			st.mode = tcpproxy.Drop
			if rng.IntN(2) == 0 {
				st.mode = tcpproxy.Stall
			}
			// Sometimes shorter than a lease, sometimes longer.
			st.length = 200*time.Millisecond + upTo(rng, 2*leaseTTL)
		case p < 17:
			st.kind = restart
		case p < 20:
			st.kind = operate
			st.action = operatorAction(rng.IntN(int(operatorActions)))
			st.replica = rng.IntN(s.replicas)
		case p < 22:
			st.kind = clockStep
			st.replica = rng.IntN(labReplicas)
			st.length = leaseMargin + upTo(rng, maxClockStep)
		default:
			st.kind = restore
			if rng.IntN(2) == 0 {
				// An operator fails over to the copy: above every
				// epoch declared so far.
				highest[d]++
				st.epoch = highest[d]
			}
		}
		s.steps = append(s.steps, st)
	}
	// Drawn last, so that a seed's steps stay what they were before.
	s.quick = rng.IntN(2) == 0
	s.shape(rng, n)
	return s
}

// shape adds the steps of the history's scenario, and a relabel to half
// the histories with several domains, and makes the history last until
// the scenario's case can have happened.
func (s *schedule) shape(rng *rand.Rand, n nemeses) {
	s.scenario = scenario(s.seed % uint64(scenarios))
	at := 300*time.Millisecond + upTo(rng, chaos/3)
	st := step{at: at, cluster: rng.IntN(len(clusterNames)), replica: rng.IntN(len(clusterNames)), domain: rng.IntN(s.domains)}
	switch s.scenario {
	case leaseScenario:
		// The lease must end before the fence moves, and the new holder
		// waits the takeover grace.
		st.kind, st.length = leaseFail, 2*leaseTTL
		s.end = max(s.end, at+2*leaseTTL+takeoverGrace+tail)
	case policyScenario:
		st.kind, st.length = brokenPolicy, leaseTTL
		s.end = max(s.end, at+leaseTTL+tail)
	case failbackScenario:
		// The late commits are sent up to two leases late.
		st.kind, st.length = failback, leaseTTL/2
		s.end = max(s.end, at+leaseTTL+st.length+2*leaseTTL+tail)
	case copyScenario:
		if !n.restores {
			return
		}
		st.kind, st.epoch = restore, 1
		s.end = max(s.end, at+4*generationPeriod+2*leaseTTL+takeoverGrace+tail)
	default:
		st.kind = 0
	}
	if st.kind != 0 {
		s.steps = append(s.steps, st)
	}
	if s.domains > 1 && rng.IntN(2) == 0 {
		s.steps = append(s.steps, step{at: 200*time.Millisecond + upTo(rng, chaos), kind: relabel, replica: rng.IntN(s.domains)})
	}
	slices.SortStableFunc(s.steps, func(a, b step) int { return cmp.Compare(a.at, b.at) })
}

// upTo draws a duration in [0, d).
func upTo(rng *rand.Rand, d time.Duration) time.Duration {
	return time.Duration(rng.Int64N(int64(d)))
}

func (s schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d, %d replica(s) per cluster, %d domain(s), first epochs", s.seed, s.replicas, s.domains)
	for d := range s.domains {
		fmt.Fprintf(&b, " [domain %d:", d)
		for c, name := range clusterNames {
			fmt.Fprintf(&b, " %s=%d", name, s.firstEpoch(c, d))
		}
		b.WriteString("]")
	}
	if s.offsets != nil {
		fmt.Fprintf(&b, ", authority replicas' clocks off by %v", s.offsets)
	}
	fmt.Fprintf(&b, ", agents declaring every %s, shaped for %s", s.declareInterval(), scenarioNames[s.scenario])
	for _, st := range s.steps {
		fmt.Fprintf(&b, "\n  at %s: %s", seconds(st.at), st)
	}
	return b.String()
}

package authority_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/authority"
)

// answer is what one cluster heard from the authority, with the times of
// the test process (one clock for every cluster and both replicas).
type answer struct {
	cluster    string
	send, recv time.Time
	ok         bool
	token      uint64
	acquired   time.Time // authority time of the holder's grant
	expires    time.Time // authority time the lease ends
	refused    bool      // fenced, regressed or acquiring: the cluster stops believing it holds the fence
	released   bool      // a successful release of the fence with this token
}

// TestConcurrentDeclarationsNeverShareTheFence runs clusters that declare
// concurrently with drifting epochs against two authority replicas over one
// etcd, like agents: a fenced holder releases, and now and then a holder
// goes silent for longer than its lease, as if partitioned. From the
// answers alone it checks that at no time two clusters could believe they
// hold the fence, and that tokens only grow.
func TestConcurrentDeclarationsNeverShareTheFence(t *testing.T) {
	const (
		clusters = 6
		leaseTTL = 300 * time.Millisecond
		runFor   = 3 * time.Second
		maxRun   = 30 * time.Second
	)
	etcd := embeddedEtcd(t)
	registries := []*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry()}
	var replicas []fencev1.FenceServiceClient
	for _, reg := range registries {
		replicas = append(replicas, serve(t, etcd, authority.Options{LeaseTTL: leaseTTL, Registerer: reg}))
	}

	ctx, cancel := context.WithTimeout(context.Background(), maxRun+30*time.Second)
	defer cancel()
	grantsOfKind := func(kind string) float64 {
		var n float64
		for _, reg := range registries {
			n += counterValue(t, reg, "fencegate_authority_grants_total", "kind", kind)
		}
		return n
	}
	// Run at least runFor, and on until the fence moved both ways — after a
	// release and after a lease expiry — or it tested little; a loaded
	// machine may need longer for the random schedule to get there.
	start := time.Now()
	stop := func() bool {
		elapsed := time.Since(start)
		return elapsed > maxRun || elapsed > runFor && grantsOfKind("after_release") > 0 && grantsOfKind("after_expiry") > 0
	}
	results := make([][]answer, clusters)
	var wg sync.WaitGroup
	for i := range clusters {
		wg.Go(func() {
			results[i] = runCluster(ctx, t, stop, fmt.Sprintf("c%d", i), uint64(1+i%3), replicas, leaseTTL)
		})
	}
	wg.Wait()

	var all []answer
	for _, r := range results {
		all = append(all, r...)
	}
	grants := checkTokens(t, all)
	checkLeasesDoNotOverlap(t, all, leaseTTL)
	checkBeliefsDoNotOverlap(t, results, leaseTTL)

	var conflicts float64
	for _, reg := range registries {
		conflicts += counterValue(t, reg, "fencegate_authority_store_retries_total", "reason", "conflict")
	}
	kinds := map[string]float64{}
	for _, kind := range []string{"first", "after_release", "after_expiry"} {
		kinds[kind] = grantsOfKind(kind)
	}
	t.Logf("%d answers, %d grants seen by the clusters, grants by kind %v, %.0f write conflicts between the replicas",
		len(all), grants, kinds, conflicts)
	// The run must have moved the fence both ways, or it tested little.
	if kinds["after_release"] == 0 || kinds["after_expiry"] == 0 {
		t.Errorf("grants by kind %v: want takeovers after a release and after a lease expiry", kinds)
	}
}

// runCluster declares as one cluster until stop says so.
func runCluster(ctx context.Context, t *testing.T, stop func() bool, name string, epoch uint64, replicas []fencev1.FenceServiceClient, ttl time.Duration) []answer {
	rng := rand.New(rand.NewPCG(uint64(len(name)), uint64(name[len(name)-1])))
	highest := epoch
	var out []answer
	for !stop() {
		switch n := rng.IntN(100); {
		case n < 8:
			epoch = highest + 1 + uint64(rng.IntN(2))
		case n < 10 && epoch > 1:
			epoch-- // a misconfiguration: refused as a regression
		case n < 14:
			epoch = highest
		}
		highest = max(highest, epoch)
		client := replicas[rng.IntN(len(replicas))]
		a := answer{cluster: name, send: time.Now()}
		resp, err := client.DeclareClusterEpoch(ctx, declareReq("", name, epoch))
		a.recv = time.Now()
		switch {
		case err == nil:
			a.ok, a.token = true, resp.GetToken()
			a.acquired = resp.GetHolder().GetAcquireTime().AsTime()
			a.expires = resp.GetHolder().GetLeaseExpireTime().AsTime()
		case status.Code(err) == codes.FailedPrecondition:
			a.refused = true
		default:
			t.Errorf("%s declares %d: %v", name, epoch, err)
			return out
		}
		out = append(out, a)

		info := errorInfo(err)
		switch {
		case info.GetReason() == rpctypes.ReasonClusterFenced && info.GetMetadata()["holder_uid"] == "uid-"+name:
			// Fenced while holding: release, as an agent does.
			epoch := max(epoch, parseUint(info.GetMetadata()["holder_epoch"]))
			resp, err := client.ReleaseFence(ctx, releaseReq("", name, epoch))
			if err == nil {
				out = append(out, answer{cluster: name, released: true, token: resp.GetFence().GetHolder().GetToken()})
			}
		case info.GetReason() == rpctypes.ReasonClusterFenced && rng.IntN(100) < 10:
			// Fail over to this cluster, as an operator does: raise its
			// epoch above the holder's and any pending takeover.
			md := info.GetMetadata()
			epoch = max(parseUint(md["holder_epoch"]), parseUint(md["pending_epoch"])) + 1
			highest = max(highest, epoch)
		case a.ok && rng.IntN(100) < 3:
			// Go silent for longer than the lease, as if partitioned.
			time.Sleep(ttl + ttl/2)
		}
	}
	return out
}

// checkTokens checks that each token belongs to one cluster, that each
// cluster sees its tokens grow, and that grants in token order were made in
// time order. It returns how many grants it saw.
func checkTokens(t *testing.T, all []answer) int {
	t.Helper()
	owner := map[uint64]string{}
	acquired := map[uint64]time.Time{}
	last := map[string]uint64{}
	for _, a := range all {
		if !a.ok {
			continue
		}
		if o, ok := owner[a.token]; ok && o != a.cluster {
			t.Errorf("token %d answered to both %s and %s", a.token, o, a.cluster)
		}
		owner[a.token], acquired[a.token] = a.cluster, a.acquired
		if a.token < last[a.cluster] {
			t.Errorf("%s got token %d after %d", a.cluster, a.token, last[a.cluster])
		}
		last[a.cluster] = a.token
	}
	tokens := slices.Sorted(func(yield func(uint64) bool) {
		for tok := range owner {
			if !yield(tok) {
				return
			}
		}
	})
	for i := 1; i < len(tokens); i++ {
		prev, cur := tokens[i-1], tokens[i]
		if owner[prev] == owner[cur] {
			t.Errorf("tokens %d and %d both went to %s with no other holder between", prev, cur, owner[cur])
		}
		if acquired[cur].Before(acquired[prev]) {
			t.Errorf("token %d was granted at %s, before token %d at %s", cur, acquired[cur], prev, acquired[prev])
		}
	}
	return len(tokens)
}

// checkLeasesDoNotOverlap checks the authority's own answers: a grant to a
// new holder happens only after the previous holder released, or after the
// end of every lease the authority gave it.
func checkLeasesDoNotOverlap(t *testing.T, all []answer, ttl time.Duration) {
	t.Helper()
	leaseEnd := map[uint64]time.Time{}
	acquired := map[uint64]time.Time{}
	releasedTokens := map[uint64]bool{}
	for _, a := range all {
		switch {
		case a.released:
			releasedTokens[a.token] = true
		case a.ok:
			if a.expires.After(leaseEnd[a.token]) {
				leaseEnd[a.token] = a.expires
			}
			acquired[a.token] = a.acquired
			if got := a.expires.Sub(a.acquired); got < ttl {
				t.Errorf("lease of token %d ends %s after its grant, less than the lease TTL", a.token, got)
			}
		}
	}
	tokens := slices.Sorted(func(yield func(uint64) bool) {
		for tok := range acquired {
			if !yield(tok) {
				return
			}
		}
	})
	for i := 1; i < len(tokens); i++ {
		prev, cur := tokens[i-1], tokens[i]
		if !releasedTokens[prev] && acquired[cur].Before(leaseEnd[prev]) {
			t.Errorf("token %d granted at %s, while the unreleased lease of token %d ran until %s",
				cur, acquired[cur].Format(time.StampMicro), prev, leaseEnd[prev].Format(time.StampMicro))
		}
	}
}

// checkBeliefsDoNotOverlap checks what the clusters could believe: a
// cluster holds the fence from receiving a success until its lease runs out
// (send time + TTL, the agent's rule) or until it hears a refusal, whichever
// is first. No two clusters' such intervals may overlap.
func checkBeliefsDoNotOverlap(t *testing.T, results [][]answer, ttl time.Duration) {
	t.Helper()
	type interval struct {
		cluster    string
		start, end time.Time
	}
	var beliefs []interval
	for _, answers := range results {
		for i, a := range answers {
			if !a.ok {
				continue
			}
			end := a.send.Add(ttl)
			for _, later := range answers[i+1:] {
				if later.refused {
					end = minTime(end, later.recv)
					break
				}
			}
			beliefs = append(beliefs, interval{a.cluster, a.recv, end})
		}
	}
	slices.SortFunc(beliefs, func(a, b interval) int { return a.start.Compare(b.start) })
	var latest interval // the interval ending latest among those started so far
	for _, b := range beliefs {
		if latest.cluster != "" && latest.cluster != b.cluster && b.start.Before(latest.end) {
			t.Errorf("%s believed it held the fence from %s, while %s believed so until %s",
				b.cluster, b.start.Format(time.StampMicro), latest.cluster, latest.end.Format(time.StampMicro))
		}
		if b.end.After(latest.end) {
			latest = b
		}
	}
}

func counterValue(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	v, err := metricValue(reg, name, label, value)
	if err != nil {
		// Errorf, not Fatalf: the run's clusters ask from their goroutines.
		t.Errorf("gather metrics: %v", err)
	}
	return v
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func parseUint(s string) uint64 {
	var n uint64
	_, _ = fmt.Sscan(s, &n)
	return n
}

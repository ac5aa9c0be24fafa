package faults

import (
	"context"
	"crypto/x509"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/engine/enginetest"
	"github.com/fencegate/fencegate/test/safety"
	"github.com/fencegate/fencegate/test/stack"
	"github.com/fencegate/fencegate/webhook"
)

// authorityLease is the authority's lease in the kill test: long enough
// for the agents' default heartbeat (5s) and margin (2s), short enough
// that the holder fails closed within seconds of the authority's death.
const authorityLease = 10 * time.Second

// fenceSnapshot is what must survive the authority: the holder, its token,
// a pending takeover and every cluster's highest epoch.
type fenceSnapshot struct {
	holder  string
	epoch   uint64
	token   uint64
	pending string
	highest map[string]uint64
}

func (f fenceSnapshot) String() string {
	return fmt.Sprintf("holder %s@%d token %d, pending %q, highest epochs %v", f.holder, f.epoch, f.token, f.pending, f.highest)
}

func (f fenceSnapshot) equal(g fenceSnapshot) bool {
	return f.holder == g.holder && f.epoch == g.epoch && f.token == g.token && f.pending == g.pending && maps.Equal(f.highest, g.highest)
}

// getFence reads the default domain's fence, waiting while the authority
// starts.
func getFence(t *testing.T, ctx context.Context, s *stack.Stack) fenceSnapshot {
	t.Helper()
	var resp *fencev1.GetFenceResponse
	eventually(t, "the authority answers GetFence", func() bool {
		callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var err error
		resp, err = s.Fence.GetFence(callCtx, &fencev1.GetFenceRequest{Domain: "default"})
		return err == nil
	})
	f := resp.GetFence()
	out := fenceSnapshot{
		holder: f.GetHolder().GetClusterName(), epoch: f.GetHolder().GetEpoch(), token: f.GetHolder().GetToken(),
		pending: f.GetPending().GetClusterName(), highest: map[string]uint64{},
	}
	for _, c := range f.GetClusters() {
		out.highest[c.GetClusterName()] = c.GetHighestEpoch()
	}
	return out
}

// admissionLoad loads one cluster's webhook with creates, validated and
// mutated.
func admissionLoad(t *testing.T, c *stack.Cluster) *load {
	t.Helper()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(c.WebhookCA) {
		t.Fatalf("%s: the webhook CA is not PEM", c.Name)
	}
	body := enginetest.Review(t, engine.ReviewRequest{Operation: "CREATE", Object: enginetest.Component("billing", "payments", nil), Username: "alice"})
	return startLoad(t, c.WebhookAddr, roots, 1, func(worker, i int) request {
		if (worker+i)%2 == 0 {
			return request{path: webhook.PathValidate, body: body}
		}
		return request{path: webhook.PathMutate, body: body}
	})
}

// decided returns the validating answers since at: how many were allowed,
// and the last denial.
func decided(answers []answer) (allowed, denied int, denial string) {
	for _, a := range answers {
		if a.err != nil || a.path != webhook.PathValidate {
			continue
		}
		if a.response.Allowed {
			allowed++
		} else {
			denied++
			denial = a.message()
		}
	}
	return allowed, denied, denial
}

// TestAuthorityKilledUnderLoad kills the fence authority (SIGKILL, right
// after it acknowledged a write) while both clusters' webhooks answer a
// stream of requests, and restarts it on the same data: nothing it
// acknowledged is lost, the holder fails closed after its lease with a
// message that says why, the agents recover by themselves, and no request
// fails at any time. (Losing an etcd member of an external cluster is
// covered by authority's TestExternalEtcdClusterSurvivesLosingAMember.)
func TestAuthorityKilledUnderLoad(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	// east starts first and holds the fence; west then starts at a higher
	// epoch and takes it over: the authority has a history to lose.
	s := stack.StartForTest(t, ctx, stack.Options{
		LeaseTTL: authorityLease, Say: t.Logf,
		Clusters: []stack.ClusterSpec{{Name: "east", Epoch: 1}, {Name: "west", Epoch: 2}},
	})
	east, west := admissionLoad(t, s.Cluster("east")), admissionLoad(t, s.Cluster("west"))
	eventually(t, "west admits", func() bool {
		allowed, _, _ := decided(west.since(west.now() - time.Second))
		return allowed > 0
	})

	// A declaration the authority acknowledges just before it dies: a
	// cluster it has never seen, refused (west holds), but recorded.
	_, err := s.Fence.DeclareClusterEpoch(ctx, &fencev1.DeclareClusterEpochRequest{Domain: "default", ClusterName: "south", ClusterUid: "south-uid", Epoch: 1})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("south's declaration: %v, want CLUSTER_FENCED", err)
	}
	before := getFence(t, ctx, s)
	if before.holder != "west" || before.highest["south"] != 1 {
		t.Fatalf("before the kill: %s; want west holding and south recorded", before)
	}
	s.Authority.Kill()
	killed := west.now()
	t.Logf("authority killed with SIGKILL; the fence was: %s", before)

	t.Run("the holder fails closed after its lease, saying why", func(t *testing.T) {
		var denial string
		eventually(t, "west denies", func() bool {
			_, denied, last := decided(west.since(killed))
			denial = last
			return denied > 0
		})
		for _, want := range []string{`cluster "west" (epoch 2) cannot confirm that it holds the ownership fence`, "connection to the fence authority"} {
			if !strings.Contains(denial, want) {
				t.Errorf("west's denial while the authority is down lacks %q:\n%s", want, denial)
			}
		}
	})
	if err := s.StartAuthority(ctx); err != nil {
		t.Fatal(err)
	}
	restarted := west.now()

	t.Run("the restarted authority lost nothing", func(t *testing.T) {
		if after := getFence(t, ctx, s); !after.equal(before) {
			t.Errorf("after SIGKILL and restart the fence is %s\nbefore it was                   %s", after, before)
		}
	})

	t.Run("the agents recover by themselves", func(t *testing.T) {
		eventually(t, "west admits again", func() bool {
			allowed, _, _ := decided(west.since(restarted))
			return allowed > 0
		})
		mark := west.now()
		eventually(t, "west stamps again", func() bool {
			for _, a := range west.since(mark) {
				if a.token() != 0 {
					return true
				}
			}
			return false
		})
		for _, a := range west.since(mark) {
			if token := a.token(); token != 0 && token != before.token {
				t.Errorf("west stamps token %d after the restart, want the unchanged %d", token, before.token)
				break
			}
		}
		if allowed, _, _ := decided(east.since(restarted)); allowed > 0 {
			t.Errorf("east admitted %d creates after the restart: it does not hold the fence", allowed)
		}
	})

	east.end()
	west.end()
	t.Run("no request failed and no two clusters admitted at once", func(t *testing.T) {
		var admissions []safety.Admission
		for name, l := range map[string]*load{"east": east, "west": west} {
			all := l.since(0)
			if msgs, n := failures(all); n > 0 {
				t.Errorf("%s: %d of %d requests failed, e.g.:\n  %s", name, n, len(all), strings.Join(msgs, "\n  "))
			}
			for _, a := range all {
				if token := a.token(); token != 0 {
					// A stamped mutation is an admission while holding:
					// the policy stamps only then.
					admissions = append(admissions, safety.Admission{
						Pod: name, Cluster: name, Start: a.at, End: a.at + a.took, Token: token,
						Status: "active", Holder: name, FenceToken: token,
					})
				}
			}
		}
		r := safety.Check(admissions)
		for _, v := range r.Violations {
			t.Error(v)
		}
		tokens := map[string]bool{}
		for _, a := range admissions {
			tokens[fmt.Sprintf("%s:%d", a.Cluster, a.Token)] = true
		}
		t.Logf("%d stamped mutations checked, tokens %v; %d and %d requests answered by east and west",
			r.Admissions, slices.Sorted(maps.Keys(tokens)), len(east.since(0)), len(west.since(0)))
	})
}

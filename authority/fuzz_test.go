package authority_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-logr/logr/funcr"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/authority"
	"github.com/fencegate/fencegate/authority/etcdbackend"
)

// fuzzLease is the lease of the fuzzed authority: long, so that holders
// stay put while the fuzzer runs and refusals are exercised.
const fuzzLease = time.Minute

// normalized is the domain a request means.
func normalized(domain string) string {
	if domain == "" {
		return "default"
	}
	return domain
}

// checkProtocolError checks that an error is one the protocol defines: a bad
// argument that names its field, a refusal with its ErrorInfo, or a new
// instance of the holder past the bound of instances.
func checkProtocolError(t *testing.T, call, domain string, err error) {
	t.Helper()
	st := status.Convert(err)
	switch st.Code() {
	case codes.InvalidArgument:
		var fields []string
		for _, d := range st.Details() {
			if br, ok := d.(*errdetails.BadRequest); ok {
				for _, v := range br.GetFieldViolations() {
					fields = append(fields, v.GetField())
				}
			}
		}
		if len(fields) != 1 || !slices.Contains([]string{"domain", "cluster_name", "cluster_uid", "epoch", "instance"}, fields[0]) || !strings.HasPrefix(st.Message(), fields[0]+": ") {
			t.Fatalf("%s: InvalidArgument %q with field violations %v: want one that names the field", call, st.Message(), fields)
		}
	case codes.FailedPrecondition:
		info := errorInfo(err)
		if info == nil || info.GetDomain() != rpctypes.ErrorDomain || info.GetMetadata()[rpctypes.MetadataDomain] != normalized(domain) ||
			!slices.Contains([]string{rpctypes.ReasonClusterFenced, rpctypes.ReasonEpochRegressed, rpctypes.ReasonAcquiring,
				rpctypes.ReasonEpochStepTooLarge, rpctypes.ReasonNotHolder, rpctypes.ReasonClusterInUse}, info.GetReason()) {
			t.Fatalf("%s: FailedPrecondition %q with ErrorInfo %v", call, st.Message(), info)
		}
	case codes.NotFound:
		if call != "forget" || !strings.Contains(st.Message(), "uid") {
			t.Fatalf("%s: NotFound %q: only forget answers it, naming the uid", call, st.Message())
		}
	case codes.ResourceExhausted:
		if !strings.Contains(st.Message(), "instances with a running lease") {
			t.Fatalf("%s: ResourceExhausted %q: want it to say the holder has too many instances", call, st.Message())
		}
	default:
		t.Fatalf("%s: %v: want OK, InvalidArgument, FailedPrecondition or ResourceExhausted", call, err)
	}
}

// FuzzRPCs sends arbitrary requests to every RPC of a real authority (gRPC
// on loopback, embedded etcd). Each answer is OK or a refusal the protocol
// defines, never another error; and after every call the domain's fence
// keeps its invariants: the token and every cluster's highest epoch never
// fall, a pending takeover is by another cluster at a higher epoch than the
// holder's, and the holder's lease and released mark sum up its instances.
func FuzzRPCs(f *testing.F) {
	f.Add(uint8(0), "", "east", "uid-east", uint64(1), "")
	f.Add(uint8(0), "", "west", "uid-west", uint64(2), "")
	f.Add(uint8(0), "", "east", "uid-east", uint64(1), "")
	f.Add(uint8(1), "", "", "uid-east", uint64(1), "")
	f.Add(uint8(2), "payments", "", "", uint64(0), "")
	f.Add(uint8(3), "", "", "", uint64(0), "")
	f.Add(uint8(0), "Bad_Domain", "east", "uid east", uint64(0), "")
	f.Add(uint8(1), "", "", strings.Repeat("u", 200), uint64(7), "")
	f.Add(uint8(0), "", "east", "uid-east", uint64(1), "east-a")
	f.Add(uint8(1), "", "", "uid-east", uint64(1), "east-a")
	f.Add(uint8(0), "", "east", "uid-east", uint64(1), "east b")
	f.Add(uint8(4), "", "east", "", uint64(0), "east-a")
	f.Add(uint8(12), "", "east", "", uint64(0), "")
	f.Add(uint8(5), "", "west", "uid-west", uint64(0), "")
	f.Add(uint8(6), "", "", "", uint64(3), "")
	f.Add(uint8(0), "", "east", "uid-east", uint64(18446744073709551615), "")
	// Nothing may log through f while fuzzing (testr would call f.Helper
	// from inside the fuzz target): etcd and the authority log nowhere.
	quiet := funcr.New(func(string, string) {}, funcr.Options{})
	starting, started := context.WithTimeout(context.Background(), 30*time.Second)
	defer started()
	etcd, err := etcdbackend.StartEmbedded(starting, etcdbackend.EmbeddedOptions{Dir: f.TempDir(), Logger: quiet})
	if err != nil {
		f.Fatalf("start embedded etcd: %v", err)
	}
	f.Cleanup(etcd.Close)
	client := serve(f, etcd.Client(), authority.Options{LeaseTTL: fuzzLease, Logger: quiet})
	// What earlier calls showed of each domain: the highest token and the
	// clusters' highest epochs.
	tokens := map[string]uint64{}
	highest := map[string]uint64{}
	f.Fuzz(func(t *testing.T, op uint8, domain, name, uid string, epoch uint64, instance string) {
		if !utf8.ValidString(domain) || !utf8.ValidString(name) || !utf8.ValidString(uid) || !utf8.ValidString(instance) {
			return // proto3 strings are UTF-8; the client cannot send these
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var err error
		calls := []string{"declare", "release", "get", "watch", "revoke", "forget", "history"}
		call := calls[int(op)%len(calls)]
		switch call {
		case "declare":
			var resp *fencev1.DeclareClusterEpochResponse
			resp, err = client.DeclareClusterEpoch(ctx, &fencev1.DeclareClusterEpochRequest{Domain: domain, ClusterName: name, ClusterUid: uid, Epoch: epoch, Instance: instance})
			if err == nil {
				h := resp.GetHolder()
				l := instanceLease(h, instance)
				if h.GetClusterUid() != uid || h.GetClusterName() != name || h.GetEpoch() != epoch || resp.GetToken() == 0 || resp.GetLeaseTtl().AsDuration() != fuzzLease ||
					l == nil || l.GetReleased() || l.GetEpoch() != epoch || !l.GetLeaseExpireTime().AsTime().Equal(h.GetLeaseExpireTime().AsTime()) {
					t.Fatalf("declared %s/%s@%d as instance %q, answered %v", name, uid, epoch, instance, resp)
				}
			}
		case "release":
			var resp *fencev1.ReleaseFenceResponse
			resp, err = client.ReleaseFence(ctx, &fencev1.ReleaseFenceRequest{Domain: domain, ClusterUid: uid, Epoch: epoch, Instance: instance})
			// Released now or before, at the instance's epoch or above; or
			// no lease to release (none, or one that has ended: the
			// authority's clock is the real one).
			if h := resp.GetFence().GetHolder(); err == nil {
				l := instanceLease(h, instance)
				running := l != nil && l.GetLeaseExpireTime().AsTime().After(time.Now())
				if h.GetClusterUid() != uid || running && (!l.GetReleased() || epoch < l.GetEpoch()) {
					t.Fatalf("released as %s@%d, instance %q, answered %v", uid, epoch, instance, resp)
				}
			}
		case "get":
			_, err = client.GetFence(ctx, &fencev1.GetFenceRequest{Domain: domain})
		case "revoke":
			req := &fencev1.RevokeFenceRequest{Domain: domain, ClusterName: name}
			if op&8 == 0 {
				req.Instance = &instance
			}
			var resp *fencev1.RevokeFenceResponse
			resp, err = client.RevokeFence(ctx, req)
			if h := resp.GetFence().GetHolder(); err == nil {
				// Nothing revoked may end sooner than its lease.
				if h.GetClusterName() != name || req.Instance == nil && !h.GetRevoked() {
					t.Fatalf("revoked %s (instance %v), answered %v", name, req.Instance, resp)
				}
				for _, l := range h.GetInstances() {
					if l.GetRevoked() && !l.GetReleased() && l.GetLeaseExpireTime().AsTime().After(resp.GetRevokedUntil().AsTime()) {
						t.Fatalf("revoked until %s, before the end of %v", resp.GetRevokedUntil().AsTime(), l)
					}
				}
			}
		case "forget":
			var resp *fencev1.ForgetClusterResponse
			resp, err = client.ForgetCluster(ctx, &fencev1.ForgetClusterRequest{Domain: domain, ClusterName: name, ClusterUid: uid})
			if err == nil {
				if h, p := resp.GetFence().GetHolder(), resp.GetFence().GetPending(); h.GetClusterUid() == uid || p.GetClusterUid() == uid {
					t.Fatalf("forgot %s/%s while it holds the fence or takes it over: %v", name, uid, resp)
				}
				delete(highest, normalized(domain)+"/"+uid)
			}
		case "history":
			var resp *fencev1.GetFenceHistoryResponse
			resp, err = client.GetFenceHistory(ctx, &fencev1.GetFenceHistoryRequest{Domain: domain, Limit: uint32(epoch % 5)})
			if n := len(resp.GetEvents()); err == nil && epoch%5 != 0 && n > int(epoch%5) {
				t.Fatalf("history with limit %d answered %d events", epoch%5, n)
			}
		default:
			var stream fencev1.FenceService_WatchFenceClient
			stream, err = client.WatchFence(ctx, &fencev1.WatchFenceRequest{Domain: domain})
			if err == nil {
				var first *fencev1.WatchFenceResponse
				first, err = stream.Recv()
				if err == nil && first.GetFence().GetDomain() != normalized(domain) {
					t.Fatalf("watched domain %q, got %v", domain, first)
				}
			}
		}
		if err != nil {
			checkProtocolError(t, call, domain, err)
			return
		}

		got, err := client.GetFence(ctx, &fencev1.GetFenceRequest{Domain: domain})
		if err != nil {
			t.Fatalf("get the fence of %q after a successful call: %v", domain, err)
		}
		fence, key := got.GetFence(), normalized(domain)
		if token := fence.GetHolder().GetToken(); token < tokens[key] {
			t.Fatalf("domain %q: token fell from %d to %d", key, tokens[key], token)
		} else {
			tokens[key] = token
		}
		for _, c := range fence.GetClusters() {
			k := key + "/" + c.GetClusterUid()
			if c.GetHighestEpoch() < highest[k] {
				t.Fatalf("domain %q: the highest epoch of %s fell from %d to %d", key, c.GetClusterUid(), highest[k], c.GetHighestEpoch())
			}
			highest[k] = c.GetHighestEpoch()
		}
		if p, h := fence.GetPending(), fence.GetHolder(); p != nil && (h == nil || p.GetEpoch() <= h.GetEpoch() ||
			p.GetClusterUid() == h.GetClusterUid() && p.GetClusterName() == h.GetClusterName()) {
			t.Fatalf("domain %q: pending takeover %v of holder %v", key, p, h)
		}
		checkHolderSummary(t, key, fence.GetHolder())
	})
}

// instanceLease returns the lease of the named instance of h, or nil.
func instanceLease(h *fencev1.Holder, instance string) *fencev1.InstanceLease {
	for _, l := range h.GetInstances() {
		if l.GetInstance() == instance {
			return l
		}
	}
	return nil
}

// checkHolderSummary checks that a holder has instances, ordered by name,
// and that its lease end and released mark sum them up: the latest lease
// among the instances that have not released (among all once each one
// released), and released once each one released.
func checkHolderSummary(t *testing.T, domain string, h *fencev1.Holder) {
	t.Helper()
	if h == nil {
		return
	}
	ls := h.GetInstances()
	if len(ls) == 0 || !slices.IsSortedFunc(ls, func(a, b *fencev1.InstanceLease) int { return strings.Compare(a.GetInstance(), b.GetInstance()) }) {
		t.Fatalf("domain %q: holder %v: want its instances, ordered by name", domain, h)
	}
	allReleased := true
	var latest, latestUnreleased time.Time
	for _, l := range ls {
		end := l.GetLeaseExpireTime().AsTime()
		allReleased = allReleased && l.GetReleased()
		if end.After(latest) {
			latest = end
		}
		if !l.GetReleased() && end.After(latestUnreleased) {
			latestUnreleased = end
		}
	}
	want := latestUnreleased
	if allReleased {
		want = latest
	}
	if h.GetReleased() != allReleased || !h.GetLeaseExpireTime().AsTime().Equal(want) {
		t.Fatalf("domain %q: holder %v: want released=%v and its lease ending at %s, from its instances", domain, h, allReleased, want)
	}
}

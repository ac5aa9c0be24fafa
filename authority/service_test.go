package authority_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/authority/authoritytest"
	"github.com/fencegate/fencegate/authority/statemachine"
)

// call is one request of a protocol test and what it must get back.
type call struct {
	advance time.Duration // moves the authority's clock before the call
	declare *fencev1.DeclareClusterEpochRequest
	release *fencev1.ReleaseFenceRequest

	wantCode     codes.Code
	wantReason   string
	wantMessage  string
	wantMetadata map[string]string
	// wantHolder is the holder named by a successful declaration; grant
	// says whether the call moved the fence (a new, higher token) or
	// renewed it (the same token).
	wantHolder string
	grant      bool
	// wantInstances, when set, are the holder's instances after a
	// successful call (see instances).
	wantInstances []string
}

func declareCall(name string, epoch uint64) call {
	return call{declare: declareReq("", name, epoch)}
}

func (c call) after(d time.Duration) call { c.advance = d; return c }

// by makes the call come from one instance of its cluster.
func (c call) by(instance string) call {
	if c.declare != nil {
		c.declare.Instance = instance
	} else {
		c.release.Instance = instance
	}
	return c
}

// instances makes a successful call check the holder's instances
// afterwards, each as "name@epoch" with " released" when it released.
func (c call) instances(want ...string) call { c.wantInstances = want; return c }

func (c call) granted(holder string) call { c.wantHolder, c.grant = holder, true; return c }

func (c call) renewed(holder string) call { c.wantHolder = holder; return c }

func (c call) refused(reason, message string, metadata map[string]string) call {
	c.wantCode, c.wantReason, c.wantMessage, c.wantMetadata = codes.FailedPrecondition, reason, message, metadata
	return c
}

func TestFenceProtocol(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	srv := authoritytest.Start(t, authoritytest.Options{LeaseTTL: 15 * time.Second, Clock: clock})
	client := srv.Client(t)

	tests := map[string][]call{
		"first declaration wins, equal epoch from another cluster is fenced": {
			declareCall("east", 3).granted("east"),
			declareCall("west", 3).after(time.Second).refused(rpctypes.ReasonClusterFenced,
				`cluster "west" (epoch 3) is fenced: cluster "east" holds the fence at epoch 3; raise west's epoch above 3 to take over`,
				map[string]string{"domain": "default", "holder_cluster": "east", "holder_uid": "uid-east", "holder_epoch": "3", "declared_epoch": "3", "reason": "HELD_BY_OTHER"}),
			declareCall("east", 3).after(time.Second).renewed("east"),
		},
		"takeover while the holder's lease runs: acquiring, holder fenced, release, grant": {
			declareCall("east", 7).granted("east"),
			declareCall("west", 8).after(5*time.Second).refused(rpctypes.ReasonAcquiring,
				`cluster "west" (epoch 8) is taking the fence over from cluster "east" (epoch 7): the last lease of east's instances ends in 10s unless each of them releases the fence sooner; retry then`,
				map[string]string{"domain": "default", "holder_cluster": "east", "holder_uid": "uid-east", "holder_epoch": "7", "declared_epoch": "8",
					"pending_cluster": "west", "pending_uid": "uid-west", "pending_epoch": "8", "retry_after_ms": "10000"}),
			declareCall("east", 7).after(time.Second).refused(rpctypes.ReasonClusterFenced,
				`cluster "east" (epoch 7) is fenced: cluster "west" is taking the fence over at epoch 8; east must stop changing its Components and release the fence`,
				map[string]string{"domain": "default", "holder_cluster": "east", "holder_uid": "uid-east", "holder_epoch": "7", "declared_epoch": "7",
					"pending_cluster": "west", "pending_uid": "uid-west", "pending_epoch": "8", "reason": "TAKEOVER_PENDING"}),
			{release: releaseReq("", "east", 7)},
			declareCall("west", 8).granted("west"),
			declareCall("east", 7).refused(rpctypes.ReasonClusterFenced,
				`cluster "east" (epoch 7) is fenced: cluster "west" holds the fence at epoch 8; raise east's epoch above 8 to take over`,
				map[string]string{"domain": "default", "holder_cluster": "west", "holder_uid": "uid-west", "holder_epoch": "8", "declared_epoch": "7", "reason": "HELD_BY_OTHER"}),
		},
		"lease expiry hands the fence over without a release": {
			declareCall("east", 1).granted("east"),
			declareCall("west", 2).after(14*time.Second).refused(rpctypes.ReasonAcquiring,
				`cluster "west" (epoch 2) is taking the fence over from cluster "east" (epoch 1): the last lease of east's instances ends in 1s unless each of them releases the fence sooner; retry then`,
				map[string]string{"domain": "default", "holder_cluster": "east", "holder_uid": "uid-east", "holder_epoch": "1", "declared_epoch": "2",
					"pending_cluster": "west", "pending_uid": "uid-west", "pending_epoch": "2", "retry_after_ms": "1000"}),
			declareCall("west", 2).after(time.Second).granted("west"),
			declareCall("east", 1).refused(rpctypes.ReasonClusterFenced,
				`cluster "east" (epoch 1) is fenced: cluster "west" holds the fence at epoch 2; raise east's epoch above 2 to take over`, nil),
		},
		"the same cluster with a lower epoch is regressed": {
			declareCall("east", 5).granted("east"),
			declareCall("east", 4).refused(rpctypes.ReasonEpochRegressed,
				`cluster "east" (uid uid-east) declared epoch 4, below epoch 5 that it declared before; a cluster restored from a backup or a lowered epoch setting does this: set east's epoch to at least 5`,
				map[string]string{"domain": "default", "holder_cluster": "east", "holder_uid": "uid-east", "holder_epoch": "5", "declared_epoch": "4", "highest_epoch": "5"}),
			declareCall("east", 6).renewed("east"),
		},
		"only the holder releases, and not with a lower epoch": {
			declareCall("east", 5).granted("east"),
			{release: releaseReq("", "west", 9), wantCode: codes.FailedPrecondition, wantReason: rpctypes.ReasonClusterFenced,
				wantMessage: `cluster uid uid-west cannot release the fence: cluster "east" (uid uid-east) holds it at epoch 5`},
			{release: releaseReq("", "east", 4), wantCode: codes.FailedPrecondition, wantReason: rpctypes.ReasonEpochRegressed,
				wantMessage: `instance "" of cluster "east" (uid uid-east) cannot release its lease of the fence with epoch 4: it declared epoch 5`},
			{release: releaseReq("", "east", 5)},
			{release: releaseReq("", "east", 5)},
			declareCall("west", 5).refused(rpctypes.ReasonClusterFenced,
				`cluster "west" (epoch 5) is fenced: cluster "east" released the fence at epoch 5; raise west's epoch above 5 to take over`, nil),
			declareCall("west", 6).granted("west"),
		},
		"two instances of the holder: the takeover waits until each one released": {
			declareCall("east", 7).by("east-a").granted("east").instances("east-a@7"),
			declareCall("east", 7).by("east-b").after(time.Second).renewed("east").instances("east-a@7", "east-b@7"),
			declareCall("west", 8).after(time.Second).refused(rpctypes.ReasonAcquiring,
				`cluster "west" (epoch 8) is taking the fence over from cluster "east" (epoch 7): the last lease of east's instances ends in 14s unless each of them releases the fence sooner; retry then`, nil),
			call{release: releaseReq("", "east", 7)}.by("east-a").instances("east-a@7 released", "east-b@7"),
			declareCall("west", 8).refused(rpctypes.ReasonAcquiring,
				`cluster "west" (epoch 8) is taking the fence over from cluster "east" (epoch 7): the last lease of east's instances ends in 14s unless each of them releases the fence sooner; retry then`, nil),
			declareCall("east", 7).by("east-c").refused(rpctypes.ReasonClusterFenced,
				`cluster "east" (epoch 7) is fenced: cluster "west" is taking the fence over at epoch 8; east must stop changing its Components and release the fence`, nil),
			call{release: releaseReq("", "east", 7)}.by("east-c").instances("east-a@7 released", "east-b@7"),
			call{release: releaseReq("", "east", 7)}.by("east-b").instances("east-a@7 released", "east-b@7 released"),
			declareCall("west", 8).granted("west").instances("@8"),
		},
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for name := range tests {
			if !yield(name) {
				return
			}
		}
	})
	for i, name := range names {
		domain := fmt.Sprintf("protocol-%d", i)
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var token uint64
			for j, c := range tests[name] {
				clock.Step(c.advance)
				var err error
				var resp *fencev1.DeclareClusterEpochResponse
				what := ""
				if c.declare != nil {
					c.declare.Domain = domain
					what = fmt.Sprintf("call %d: %s declares %d", j, c.declare.GetClusterName(), c.declare.GetEpoch())
					resp, err = client.DeclareClusterEpoch(ctx, c.declare)
				} else {
					c.release.Domain = domain
					what = fmt.Sprintf("call %d: %s/%q releases at %d", j, c.release.GetClusterUid(), c.release.GetInstance(), c.release.GetEpoch())
					var rel *fencev1.ReleaseFenceResponse
					rel, err = client.ReleaseFence(ctx, c.release)
					if err == nil {
						checkInstances(t, what, rel.GetFence().GetHolder(), c.wantInstances)
					}
				}
				if got := status.Code(err); got != c.wantCode {
					t.Fatalf("%s: %v, want code %s", what, err, c.wantCode)
				}
				if err != nil {
					checkRefusal(t, what, err, c, domain)
					continue
				}
				if resp == nil {
					continue
				}
				h := resp.GetHolder()
				if h.GetClusterName() != c.wantHolder || resp.GetToken() != h.GetToken() {
					t.Errorf("%s: holder %v (token %d), want %s", what, h, resp.GetToken(), c.wantHolder)
				}
				if c.grant != (resp.GetToken() != token) || resp.GetToken() < token {
					t.Errorf("%s: token %d after %d; want a new, higher token: %v", what, resp.GetToken(), token, c.grant)
				}
				token = resp.GetToken()
				checkInstances(t, what, h, c.wantInstances)
				if want := clock.Now().Add(15 * time.Second); !h.GetLeaseExpireTime().AsTime().Equal(want) {
					t.Errorf("%s: lease expires at %s, want %s", what, h.GetLeaseExpireTime().AsTime(), want)
				}
			}
		})
	}
}

// checkInstances compares the holder's instances with want, unless want is
// nil.
func checkInstances(t *testing.T, what string, h *fencev1.Holder, want []string) {
	t.Helper()
	if want == nil {
		return
	}
	var got []string
	for _, l := range h.GetInstances() {
		s := fmt.Sprintf("%s@%d", l.GetInstance(), l.GetEpoch())
		if l.GetReleased() {
			s += " released"
		}
		got = append(got, s)
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s: holder's instances %v, want %v", what, got, want)
	}
}

func checkRefusal(t *testing.T, what string, err error, c call, domain string) {
	t.Helper()
	st := status.Convert(err)
	msg := st.Message()
	if domain != "default" {
		msg = strings.ReplaceAll(msg, fmt.Sprintf(" of domain %q", domain), "")
	}
	if msg != c.wantMessage {
		t.Errorf("%s: message\n  %s\nwant\n  %s", what, msg, c.wantMessage)
	}
	info := errorInfo(err)
	if info == nil {
		t.Fatalf("%s: no ErrorInfo in %v", what, st.Details())
	}
	if info.GetDomain() != rpctypes.ErrorDomain || info.GetReason() != c.wantReason {
		t.Errorf("%s: ErrorInfo %s/%s, want %s/%s", what, info.GetDomain(), info.GetReason(), rpctypes.ErrorDomain, c.wantReason)
	}
	if c.wantMetadata != nil {
		want := map[string]string{}
		for k, v := range c.wantMetadata {
			want[k] = v
		}
		want["domain"] = domain
		// A fenced or acquiring cluster is told its generation, a time
		// the test does not script: it must be there, and a number.
		if c.wantReason == rpctypes.ReasonClusterFenced || c.wantReason == rpctypes.ReasonAcquiring {
			g := info.GetMetadata()[rpctypes.MetadataClusterGeneration]
			if n, err := strconv.ParseUint(g, 10, 64); err != nil || n == 0 {
				t.Errorf("%s: cluster generation %q in the ErrorInfo, want a positive number", what, g)
			}
			want[rpctypes.MetadataClusterGeneration] = g
		}
		if diff := cmp.Diff(want, info.GetMetadata()); diff != "" {
			t.Errorf("%s: ErrorInfo metadata (-want +got):\n%s", what, diff)
		}
	}
}

func TestInvalidArguments(t *testing.T) {
	srv := authoritytest.Start(t, authoritytest.Options{})
	client := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	valid := func() *fencev1.DeclareClusterEpochRequest {
		return &fencev1.DeclareClusterEpochRequest{ClusterName: "east", ClusterUid: "uid-east", Epoch: 1}
	}
	tests := map[string]struct {
		call      func() error
		wantField string
	}{
		"declare: empty cluster name": {call: func() error {
			r := valid()
			r.ClusterName = ""
			_, err := client.DeclareClusterEpoch(ctx, r)
			return err
		}, wantField: "cluster_name"},
		"declare: cluster name is not a DNS label": {call: func() error {
			r := valid()
			r.ClusterName = "East.1"
			_, err := client.DeclareClusterEpoch(ctx, r)
			return err
		}, wantField: "cluster_name"},
		"declare: empty cluster uid": {call: func() error {
			r := valid()
			r.ClusterUid = ""
			_, err := client.DeclareClusterEpoch(ctx, r)
			return err
		}, wantField: "cluster_uid"},
		"declare: epoch 0": {call: func() error {
			r := valid()
			r.Epoch = 0
			_, err := client.DeclareClusterEpoch(ctx, r)
			return err
		}, wantField: "epoch"},
		"declare: bad domain": {call: func() error {
			r := valid()
			r.Domain = "prod/fence"
			_, err := client.DeclareClusterEpoch(ctx, r)
			return err
		}, wantField: "domain"},
		"release: empty cluster uid": {call: func() error {
			_, err := client.ReleaseFence(ctx, &fencev1.ReleaseFenceRequest{Epoch: 1})
			return err
		}, wantField: "cluster_uid"},
		"declare: instance with a space": {call: func() error {
			r := valid()
			r.Instance = "pod 1"
			_, err := client.DeclareClusterEpoch(ctx, r)
			return err
		}, wantField: "instance"},
		"release: instance too long": {call: func() error {
			_, err := client.ReleaseFence(ctx, &fencev1.ReleaseFenceRequest{ClusterUid: "u", Epoch: 1, Instance: strings.Repeat("p", 254)})
			return err
		}, wantField: "instance"},
		"release: epoch 0": {call: func() error {
			_, err := client.ReleaseFence(ctx, &fencev1.ReleaseFenceRequest{ClusterUid: "u"})
			return err
		}, wantField: "epoch"},
		"get: bad domain": {call: func() error {
			_, err := client.GetFence(ctx, &fencev1.GetFenceRequest{Domain: "UPPER"})
			return err
		}, wantField: "domain"},
		"watch: bad domain": {call: func() error {
			stream, err := client.WatchFence(ctx, &fencev1.WatchFenceRequest{Domain: "a..b"})
			if err != nil {
				return err
			}
			_, err = stream.Recv()
			return err
		}, wantField: "domain"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := tc.call()
			st := status.Convert(err)
			if st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), tc.wantField+": ") {
				t.Fatalf("error = %v, want InvalidArgument naming %s", err, tc.wantField)
			}
			var fields []string
			for _, d := range st.Details() {
				if br, ok := d.(*errdetails.BadRequest); ok {
					for _, v := range br.GetFieldViolations() {
						fields = append(fields, v.GetField())
					}
				}
			}
			if !slices.Equal(fields, []string{tc.wantField}) {
				t.Errorf("BadRequest field violations %v, want [%s]", fields, tc.wantField)
			}
		})
	}
}

// TestTooManyInstances: the holder keeps a lease for at most MaxInstances
// instances at a time; a new one past that is told to retry later
// (ResourceExhausted), and is renewed once the others' leases ended.
func TestTooManyInstances(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	srv := authoritytest.Start(t, authoritytest.Options{LeaseTTL: 15 * time.Second, Clock: clock})
	client := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	declare := func(instance string) error {
		r := declareReq("", "east", 1)
		r.Instance = instance
		_, err := client.DeclareClusterEpoch(ctx, r)
		return err
	}
	for i := range statemachine.MaxInstances {
		if err := declare(fmt.Sprintf("pod-%d", i)); err != nil {
			t.Fatalf("instance %d: %v", i, err)
		}
	}
	err := declare("one-too-many")
	if st := status.Convert(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), `instance "one-too-many" is refused`) {
		t.Fatalf("one instance too many: %v, want ResourceExhausted naming it", err)
	}
	if err := declare("pod-0"); err != nil {
		t.Errorf("an instance with a lease renews at the bound: %v", err)
	}
	clock.Step(15 * time.Second)
	if err := declare("one-too-many"); err != nil {
		t.Errorf("once the other leases ended: %v", err)
	}
}

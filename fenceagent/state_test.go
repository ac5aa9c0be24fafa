package fenceagent

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/fencestate"
)

func TestRulesNext(t *testing.T) {
	r := rules{domain: "default", self: testSelf, margin: 2 * time.Second}
	sent := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	now := sent.Add(100 * time.Millisecond)
	const stale = 15 * time.Second
	req := &fencev1.DeclareClusterEpochRequest{ClusterName: testSelf.Name, ClusterUid: testSelf.UID, Epoch: testSelf.Epoch}
	// grant is a grant of a new lease, which counts from this declaration's
	// send; kept is one of the lease got by a declaration sent before.
	grant := func(ttl time.Duration) answer {
		a := decode(grantResp(req, ttl, 42))
		a.leaseSent = sent
		return a
	}
	kept := func(before time.Duration) answer {
		a := grant(15 * time.Second)
		a.leaseSent = sent.Add(-before)
		return a
	}
	earlier := sent.Add(-time.Minute)
	active := fencestate.State{
		Status: fencestate.Active, Domain: "default", Cluster: testSelf, Holder: testSelf, Token: 41,
		ValidUntilNS: sent.Add(3 * time.Second).UnixNano(), LastSuccessNS: earlier.UnixNano(),
	}
	activeExpires := sent.Add(3 * time.Second)
	unknown := r.initial()

	tests := map[string]struct {
		cur         fencestate.State
		curExpires  time.Time
		answer      answer
		want        fencestate.State
		wantExpires time.Time
		// wantMessage is a part the message must contain.
		wantMessage string
	}{
		"a grant is active until send time + lease TTL - margin": {
			cur: unknown, answer: grant(15 * time.Second),
			want: fencestate.State{
				Status: fencestate.Active, Domain: "default", Cluster: testSelf, Holder: testSelf, Token: 42,
				ValidUntilNS: sent.Add(13 * time.Second).UnixNano(), LastSuccessNS: sent.UnixNano(),
			},
			wantExpires: sent.Add(13 * time.Second),
		},
		"a kept lease counts from the send of the declaration that got it": {
			cur: active, curExpires: activeExpires, answer: kept(4 * time.Second),
			want: fencestate.State{
				Status: fencestate.Active, Domain: "default", Cluster: testSelf, Holder: testSelf, Token: 42,
				ValidUntilNS: sent.Add(9 * time.Second).UnixNano(), LastSuccessNS: sent.UnixNano(),
			},
			wantExpires: sent.Add(9 * time.Second),
		},
		"a kept lease that less the margin ended on arrival is unknown": {
			cur: active, curExpires: activeExpires, answer: kept(13 * time.Second),
			want: fencestate.State{
				Status: fencestate.Unknown, Domain: "default", Cluster: testSelf, Holder: testSelf,
				LastSuccessNS: sent.UnixNano(), Reason: fencestate.ReasonLeaseExpired,
			},
			wantMessage: "13.1s after the declaration that got it was sent",
		},
		"a grant whose lease less the margin ended on arrival is unknown": {
			cur: unknown, answer: grant(2 * time.Second),
			want: fencestate.State{
				Status: fencestate.Unknown, Domain: "default", Cluster: testSelf, Holder: testSelf,
				LastSuccessNS: sent.UnixNano(), Reason: fencestate.ReasonLeaseExpired,
			},
			wantMessage: "lower --lease-margin",
		},
		"a grant naming another holder is not trusted": {
			cur: unknown, answer: answer{kind: granted, holder: testWest, leaseTTL: 15 * time.Second, token: 9},
			want: fencestate.State{
				Status: fencestate.Unknown, Domain: "default", Cluster: testSelf, Holder: testWest,
				LastSuccessNS: sent.UnixNano(), Reason: fencestate.ReasonUnexpectedError,
			},
			wantMessage: "instead of this cluster",
		},
		"CLUSTER_FENCED is fenced, trusted for one lease": {
			cur: active, curExpires: activeExpires, answer: decode(nil, refusalErr(rpctypes.ReasonClusterFenced, testWest, 7, 0)),
			want: fencestate.State{
				Status: fencestate.Fenced, Domain: "default", Cluster: testSelf, Holder: testWest,
				LastSuccessNS: sent.UnixNano(), Reason: rpctypes.ReasonClusterFenced,
			},
			wantExpires: sent.Add(stale),
			wantMessage: "raise its epoch above 8",
		},
		"CLUSTER_FENCED naming this cluster as holder: a takeover is pending": {
			cur: active, curExpires: activeExpires, answer: decode(nil, refusalErr(rpctypes.ReasonClusterFenced, testSelf, 7, 0)),
			want: fencestate.State{
				Status: fencestate.Fenced, Domain: "default", Cluster: testSelf, Holder: testSelf,
				LastSuccessNS: sent.UnixNano(), Reason: rpctypes.ReasonClusterFenced,
			},
			wantExpires: sent.Add(stale),
			wantMessage: "releases the fence",
		},
		"CLUSTER_EPOCH_REGRESSED": {
			cur: unknown, answer: decode(nil, refusalErr(rpctypes.ReasonEpochRegressed, testWest, 7, 0)),
			want: fencestate.State{
				Status: fencestate.EpochRegressed, Domain: "default", Cluster: testSelf, Holder: testWest,
				LastSuccessNS: sent.UnixNano(), Reason: rpctypes.ReasonEpochRegressed,
			},
			wantExpires: sent.Add(stale),
			wantMessage: "restored from a backup",
		},
		"FENCE_ACQUIRING": {
			cur: unknown, answer: decode(nil, refusalErr(rpctypes.ReasonAcquiring, testWest, 7, 4*time.Second)),
			want: fencestate.State{
				Status: fencestate.Acquiring, Domain: "default", Cluster: testSelf, Holder: testWest,
				LastSuccessNS: sent.UnixNano(), Reason: rpctypes.ReasonAcquiring,
			},
			wantExpires: sent.Add(stale),
			wantMessage: "in about 4s",
		},
		"CLUSTER_RESTORED is unknown with no expiry and keeps the last holder": {
			cur: active, curExpires: activeExpires, answer: decode(nil, restoredRefusal(5, 9)),
			want: fencestate.State{
				Status: fencestate.Unknown, Domain: "default", Cluster: testSelf, Holder: testSelf,
				LastSuccessNS: sent.UnixNano(), Reason: rpctypes.ReasonClusterRestored,
			},
			wantMessage: "restored from a backup",
		},
		"Unimplemented is unsupported until another answer": {
			cur: active, curExpires: activeExpires, answer: decode(nil, status.Error(codes.Unimplemented, "unknown service")),
			want: fencestate.State{
				Status: fencestate.Unsupported, Domain: "default", Cluster: testSelf,
				LastSuccessNS: earlier.UnixNano(), Reason: fencestate.ReasonUnimplemented,
			},
			wantMessage: "point the agent at a fencegate authority",
		},
		"a transient error keeps an active status and its expiry": {
			cur: active, curExpires: activeExpires, answer: decode(nil, status.Error(codes.Unavailable, "down")),
			want: active, wantExpires: activeExpires,
		},
		"a transient error tells an unknown status why": {
			cur: unknown, answer: decode(nil, status.Error(codes.Unavailable, "connection refused")),
			want: fencestate.State{
				Status: fencestate.Unknown, Domain: "default", Cluster: testSelf, Reason: fencestate.ReasonNoAnswerYet,
			},
			wantMessage: "connection refused",
		},
		"an unexpected error is unknown and keeps the last holder": {
			cur: active, curExpires: activeExpires, answer: decode(nil, status.Error(codes.PermissionDenied, "certificate not allowed")),
			want: fencestate.State{
				Status: fencestate.Unknown, Domain: "default", Cluster: testSelf, Holder: testSelf,
				LastSuccessNS: earlier.UnixNano(), Reason: fencestate.ReasonUnexpectedError,
			},
			wantMessage: "certificate not allowed",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, expires := r.next(tc.cur, tc.curExpires, tc.answer, sent, now, stale)
			if !strings.Contains(got.Message, tc.wantMessage) {
				t.Errorf("message %q does not contain %q", got.Message, tc.wantMessage)
			}
			if tc.want.Message == "" {
				got.Message = ""
			}
			if got != tc.want {
				t.Errorf("state:\n got %+v\nwant %+v", got, tc.want)
			}
			if !expires.Equal(tc.wantExpires) {
				t.Errorf("expires = %s, want %s", expires, tc.wantExpires)
			}
		})
	}
}

func TestRulesExpired(t *testing.T) {
	r := rules{domain: "default", self: testSelf, margin: 2 * time.Second}
	last := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano()
	tests := map[string]struct {
		cur        fencestate.State
		wantReason string
	}{
		"an unrenewed active lease expires": {
			cur:        fencestate.State{Status: fencestate.Active, Cluster: testSelf, Holder: testSelf, Token: 42, ValidUntilNS: last + 13e9, LastSuccessNS: last},
			wantReason: fencestate.ReasonLeaseExpired,
		},
		"an old refusal is no longer relied on": {
			cur:        fencestate.State{Status: fencestate.Fenced, Cluster: testSelf, Holder: testWest, LastSuccessNS: last, Reason: rpctypes.ReasonClusterFenced},
			wantReason: fencestate.ReasonAuthorityUnreachable,
		},
		"an unrenewed lease of an earlier epoch keeps naming it": {
			cur:        fencestate.State{Status: fencestate.Active, Cluster: withEpoch(testSelf, 5), Holder: testSelf, Token: 42, ValidUntilNS: last + 13e9, LastSuccessNS: last},
			wantReason: fencestate.ReasonLeaseExpired,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := r.expired(tc.cur)
			want := fencestate.State{
				Status: fencestate.Unknown, Domain: "default", Cluster: tc.cur.Cluster, Holder: tc.cur.Holder,
				LastSuccessNS: last, Reason: tc.wantReason, Message: got.Message,
			}
			if got != want {
				t.Errorf("state:\n got %+v\nwant %+v", got, want)
			}
			if !strings.Contains(got.Message, "2030-01-02T03:04:05Z") {
				t.Errorf("message %q does not say when the authority answered last", got.Message)
			}
		})
	}
}

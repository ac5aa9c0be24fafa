package authority_test

import (
	"cmp"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/authority"
	"github.com/fencegate/fencegate/authority/authoritytest"
)

// TestClusterUIDIsBoundToItsName: the identity bound to east may declare
// only as east, but nothing in the authorization file says which UID east
// has; the authority binds each UID to the name it first declared. East
// declaring west's UID (which GetFence shows), far above west's epoch, is
// refused, and nothing of west's record changes: west keeps the fence,
// releases it, and can still be forgotten by its own name.
func TestClusterUIDIsBoundToItsName(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := startSecured(t, authoritytest.Options{LeaseTTL: 15 * time.Second})
	east, west, oncall := s.clients[eastID], s.clients[westID], s.clients[oncallID]
	if _, err := west.DeclareClusterEpoch(ctx, declareReq("", "west", 3)); err != nil {
		t.Fatal(err)
	}
	before, err := oncall.GetFence(ctx, &fencev1.GetFenceRequest{})
	if err != nil {
		t.Fatal(err)
	}

	forged := &fencev1.DeclareClusterEpochRequest{ClusterName: "east", ClusterUid: "uid-west", Epoch: 1003}
	_, err = east.DeclareClusterEpoch(ctx, forged)
	info := errorInfo(err)
	if status.Code(err) != codes.PermissionDenied || info.GetReason() != rpctypes.ReasonPermissionDenied || info.GetMetadata()[rpctypes.MetadataBoundCluster] != "west" {
		t.Fatalf("east declaring west's uid: %v (%v), want PermissionDenied naming the bound cluster west", err, info.GetMetadata())
	}
	after, err := oncall.GetFence(ctx, &fencev1.GetFenceRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := after.GetFence().GetClusters(), before.GetFence().GetClusters(); len(got) != len(want) || got[0].GetClusterName() != "west" || got[0].GetHighestEpoch() != 3 {
		t.Fatalf("the cluster records changed under a refused declaration: %v, were %v", got, want)
	}

	// West is unaffected: it renews, releases, and can be forgotten.
	if _, err := west.DeclareClusterEpoch(ctx, declareReq("", "west", 3)); err != nil {
		t.Fatalf("west renews after the forged declaration: %v", err)
	}
	release := releaseReq("", "west", 3)
	release.ClusterName = "west"
	if _, err := west.ReleaseFence(ctx, release); err != nil {
		t.Fatalf("west releases: %v", err)
	}
	s.clock.Step(time.Minute)
	if _, err := east.DeclareClusterEpoch(ctx, declareReq("", "east", 4)); err != nil {
		t.Fatalf("east takes over with its own uid: %v", err)
	}
	if _, err := oncall.ForgetCluster(ctx, &fencev1.ForgetClusterRequest{ClusterName: "west", ClusterUid: "uid-west"}); err != nil {
		t.Fatalf("forget west by its own name: %v", err)
	}
}

// logLines collects the lines a logr.Logger writes, as JSON objects.
type logLines struct {
	mu    sync.Mutex
	lines []map[string]any
}

func (l *logLines) logger() logr.Logger {
	return funcr.NewJSON(func(obj string) {
		var line map[string]any
		if err := json.Unmarshal([]byte(obj), &line); err != nil {
			line = map[string]any{"unparsed": obj}
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, line)
	}, funcr.Options{})
}

// refusals are the lines logged with msg "call refused".
func (l *logLines) refusals() []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range l.lines {
		if line["msg"] == "call refused" {
			out = append(out, line)
		}
	}
	return out
}

// TestUIDBindingRefusalIsCountedAndLogged: a declaration of a cluster UID
// under another name than the one it is bound to is refused with a message
// that gives the whole command that forgets the bound name, counted in
// fencegate_authority_permission_denied_total{method="DeclareClusterEpoch"}
// (which FencegateAuthorityPermissionDenied alerts on) and logged at error
// level at most once a minute per identity and method, with or without an
// authorization file, and without a Guard given to the server.
func TestUIDBindingRefusalIsCountedAndLogged(t *testing.T) {
	type running struct {
		east, west fencev1.FenceServiceClient
		clock      *clocktesting.FakeClock
		// reg has the Guard's metrics; nil if they go nowhere.
		reg *prometheus.Registry
	}
	for name, tc := range map[string]struct {
		start  func(t *testing.T, log logr.Logger) running
		domain string
		// forgedDomain is where east declares west's UID; domain if
		// empty.
		forgedDomain string
		// uid is west's UID; "uid-west" if empty.
		uid          string
		wantIdentity string
		wantForget   string
	}{
		"authorization file": {
			start: func(t *testing.T, log logr.Logger) running {
				s := startSecured(t, authoritytest.Options{Logger: log})
				return running{east: s.clients[eastID], west: s.clients[westID], clock: s.clock, reg: s.reg}
			},
			wantIdentity: eastID,
			wantForget:   "(fencegate fence forget --cluster west --cluster-uid uid-west)",
		},
		"no authorization file, another domain": {
			start: func(t *testing.T, log logr.Logger) running {
				s := startMTLS(t, authoritytest.Options{Logger: log}, "")
				return running{east: s.clients[eastID], west: s.clients[westID], clock: s.clock, reg: s.reg}
			},
			domain:       "blue",
			wantIdentity: eastID,
			wantForget:   "(fencegate fence forget --domain blue --cluster west --cluster-uid uid-west)",
		},
		// West's UID is bound in every domain, not only in those west
		// declared in: east cannot squat it where west has not joined.
		"a domain west has not joined": {
			start: func(t *testing.T, log logr.Logger) running {
				s := startMTLS(t, authoritytest.Options{Logger: log}, "")
				return running{east: s.clients[eastID], west: s.clients[westID], clock: s.clock, reg: s.reg}
			},
			domain:       "blue",
			forgedDomain: "green",
			wantIdentity: eastID,
			wantForget:   `bound to cluster "west" in domain "blue", not "east": a cluster cannot declare another cluster's UID, in any domain; to rename a cluster, forget it first in each domain that records it (fencegate fence forget --domain blue --cluster west --cluster-uid uid-west)`,
		},
		"no guard given to the server": {
			start: func(t *testing.T, log logr.Logger) running {
				clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
				client := serve(t, embeddedEtcd(t), authority.Options{Clock: clk, Logger: log})
				return running{east: client, west: client, clock: clk}
			},
			// A UID the shell would misread is quoted for it.
			uid:        "uid-'west'",
			wantForget: `(fencegate fence forget --cluster west --cluster-uid 'uid-'\''west'\''')`,
		},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var logs logLines
			a := tc.start(t, logs.logger())
			uid := cmp.Or(tc.uid, "uid-west")
			if _, err := a.west.DeclareClusterEpoch(ctx, &fencev1.DeclareClusterEpochRequest{Domain: tc.domain, ClusterName: "west", ClusterUid: uid, Epoch: 3}); err != nil {
				t.Fatal(err)
			}
			forgedDomain := cmp.Or(tc.forgedDomain, tc.domain)
			forged := &fencev1.DeclareClusterEpochRequest{Domain: forgedDomain, ClusterName: "east", ClusterUid: uid, Epoch: 3}
			refuse := func(what string) {
				t.Helper()
				_, err := a.east.DeclareClusterEpoch(ctx, forged)
				if status.Code(err) != codes.PermissionDenied || errorInfo(err).GetMetadata()[rpctypes.MetadataBoundCluster] != "west" {
					t.Fatalf("%s: %v, want PermissionDenied naming the bound cluster west", what, err)
				}
				if msg := status.Convert(err).Message(); !strings.Contains(msg, tc.wantForget) {
					t.Fatalf("%s: message %q does not give the command %s", what, msg, tc.wantForget)
				}
			}
			checkCounted := func(want float64) {
				t.Helper()
				if a.reg == nil {
					return
				}
				if got, err := metricValue(a.reg, "fencegate_authority_permission_denied_total", "method", "DeclareClusterEpoch"); err != nil || got != want {
					t.Errorf("permission_denied_total{method=DeclareClusterEpoch} = %v (%v), want %v", got, err, want)
				}
			}
			checkLogged := func(want int) {
				t.Helper()
				lines := logs.refusals()
				if len(lines) != want {
					t.Fatalf("%d refusals logged, want %d: %v", len(lines), want, lines)
				}
				line := lines[len(lines)-1]
				if _, isError := line["error"]; !isError || line["level"] != nil {
					t.Errorf("refusal logged %v, want at error level", line)
				}
				wantKV := map[string]any{"identity": tc.wantIdentity, "method": "DeclareClusterEpoch", "cluster": "east",
					"domain": rpctypes.NormalizeDomain(forgedDomain), "uid": uid, "boundCluster": "west"}
				for k, v := range wantKV {
					if line[k] != v {
						t.Errorf("refusal logged %s=%v, want %v: %v", k, line[k], v, line)
					}
				}
				if reason, _ := line["reason"].(string); !strings.Contains(reason, tc.wantForget) {
					t.Errorf("refusal logged with reason %q, want the message the client got", reason)
				}
			}

			refuse("the first forged declaration")
			checkCounted(1)
			checkLogged(1)
			// Every heartbeat is refused and counted; the log has one
			// line a minute.
			for range 3 {
				a.clock.Step(15 * time.Second)
				refuse("a repeated forged declaration")
			}
			checkCounted(4)
			checkLogged(1)
			a.clock.Step(15 * time.Second)
			refuse("a forged declaration a minute after the first")
			checkCounted(5)
			checkLogged(2)
		})
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/authority/authoritytest"
	"github.com/fencegate/fencegate/cmd/fencegate/internal/fenceprint"
)

// t0 is when the fence tests' clock starts: 2023-11-14T22:13:20Z.
var t0 = time.Unix(1_700_000_000, 0)

// runFence runs `fencegate fence args...` with the given clock and returns
// its standard output.
func runFence(ctx context.Context, clk *clocktesting.FakeClock, args ...string) (string, error) {
	cmd := newFenceCommandWithClock(clk)
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	return out.String(), err
}

func declare(ctx context.Context, t *testing.T, client fencev1.FenceServiceClient, name string, epoch uint64) *fencev1.DeclareClusterEpochResponse {
	t.Helper()
	return declareAs(ctx, t, client, name, epoch, "")
}

// declareAs declares as one instance of a cluster.
func declareAs(ctx context.Context, t *testing.T, client fencev1.FenceServiceClient, name string, epoch uint64, instance string) *fencev1.DeclareClusterEpochResponse {
	t.Helper()
	resp, _ := client.DeclareClusterEpoch(ctx, &fencev1.DeclareClusterEpochRequest{ClusterName: name, ClusterUid: "uid-" + name, Epoch: epoch, Instance: instance})
	return resp
}

// takeoverPending makes east the holder at epoch 7 with two instances
// (east-1 at t0, east-2 at t0+1s), west a pending takeover at epoch 8 and
// north a fenced cluster at epoch 3, then moves the clock on to t0+4s. It
// returns east's token.
func takeoverPending(ctx context.Context, t *testing.T, clk *clocktesting.FakeClock, client fencev1.FenceServiceClient) uint64 {
	t.Helper()
	east := declareAs(ctx, t, client, "east", 7, "east-1")
	if east == nil {
		t.Fatal("east was not granted the fence")
	}
	clk.Step(time.Second)
	if declareAs(ctx, t, client, "east", 7, "east-2") == nil {
		t.Fatal("east's second instance was refused")
	}
	clk.Step(time.Second)
	declare(ctx, t, client, "west", 8)
	clk.Step(time.Second)
	declare(ctx, t, client, "north", 3)
	clk.Step(time.Second)
	return east.GetToken()
}

func TestFenceStatus(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	srv := authoritytest.Start(t, authoritytest.Options{LeaseTTL: 15 * time.Second, Clock: clk})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	out, err := runFence(ctx, clk, "status", "--authority", srv.Addr)
	if err != nil {
		t.Fatalf("status of an empty fence: %v", err)
	}
	want := `Domain:     default
Holder:     none: no cluster declared in this domain yet
Pending:    none
Lease TTL:  15s
`
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("status of an empty fence (-want +got):\n%s", diff)
	}

	token := takeoverPending(ctx, t, clk, srv.Client(t))
	out, err = runFence(ctx, clk, "status", "--authority", srv.Addr)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	want = fmt.Sprintf(`Domain:     default
Holder:     east (uid uid-east) at epoch 7, token %d
Acquired:   2023-11-14T22:13:20Z (4s ago)
Lease:      ends in 12s, at 2023-11-14T22:13:36Z
Pending:    west (uid uid-west) at epoch 8, waiting since 2023-11-14T22:13:22Z (2s ago)
Lease TTL:  15s

INSTANCE  EPOCH  LEASE
east-1    7      ends in 11s, at 2023-11-14T22:13:35Z
east-2    7      ends in 12s, at 2023-11-14T22:13:36Z

CLUSTER  UID        HIGHEST EPOCH  LAST EPOCH  LAST DECLARATION      AGE
east     uid-east   7              7           2023-11-14T22:13:21Z  3s
north    uid-north  3              3           2023-11-14T22:13:23Z  1s
west     uid-west   8              8           2023-11-14T22:13:22Z  2s
`, token)
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}

	out, err = runFence(ctx, clk, "status", "--authority", srv.Addr, "-o", "json")
	if err != nil {
		t.Fatalf("status -o json: %v", err)
	}
	var got fenceprint.FenceView
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("status -o json is not JSON: %v\n%s", err, out)
	}
	wantView := fenceprint.FenceView{
		Domain: "default",
		Holder: &fenceprint.HolderView{
			ClusterName: "east", ClusterUID: "uid-east", Epoch: 7, Token: token,
			AcquireTime: t0.UTC(), LeaseExpireTime: t0.Add(16 * time.Second).UTC(), LeaseRemainingSeconds: 12,
			Instances: []fenceprint.InstanceView{
				{Instance: "east-1", Epoch: 7, LeaseExpireTime: t0.Add(15 * time.Second).UTC(), LeaseRemainingSeconds: 11},
				{Instance: "east-2", Epoch: 7, LeaseExpireTime: t0.Add(16 * time.Second).UTC(), LeaseRemainingSeconds: 12},
			},
		},
		Pending:         &fenceprint.PendingView{ClusterName: "west", ClusterUID: "uid-west", Epoch: 8, RequestTime: t0.Add(2 * time.Second).UTC()},
		LeaseTTLSeconds: 15,
		Revision:        got.Revision,
		Clusters: []fenceprint.ClusterView{
			{ClusterName: "east", ClusterUID: "uid-east", HighestEpoch: 7, LastEpoch: 7, LastDeclareTime: t0.Add(time.Second).UTC()},
			{ClusterName: "north", ClusterUID: "uid-north", HighestEpoch: 3, LastEpoch: 3, LastDeclareTime: t0.Add(3 * time.Second).UTC()},
			{ClusterName: "west", ClusterUID: "uid-west", HighestEpoch: 8, LastEpoch: 8, LastDeclareTime: t0.Add(2 * time.Second).UTC()},
		},
	}
	if diff := cmp.Diff(wantView, got); diff != "" {
		t.Errorf("status -o json (-want +got):\n%s", diff)
	}
	if got.Revision <= 0 {
		t.Errorf("revision %d, want the store's positive revision", got.Revision)
	}
}

func TestFenceRelease(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	srv := authoritytest.Start(t, authoritytest.Options{LeaseTTL: 15 * time.Second, Clock: clk})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	takeoverPending(ctx, t, clk, srv.Client(t))

	// The cases run in order: east's instances release one after the
	// other.
	tests := []struct {
		name    string
		args    []string
		wantOut string
		// wantIn is a part of the fence the output must show.
		wantIn  string
		wantErr string
	}{
		{name: "no uid", args: []string{"--cluster", "east", "--epoch", "7"}, wantErr: "--cluster, --cluster-uid and --epoch name the holder that releases: all are required"},
		{name: "not the holder", args: []string{"--cluster", "west", "--cluster-uid", "uid-west", "--epoch", "8"},
			wantErr: `cluster "west" (uid uid-west) cannot release the fence: cluster "east" (uid uid-east) holds it at epoch 7`},
		{name: "the holder's uid under another name", args: []string{"--cluster", "west", "--cluster-uid", "uid-east", "--epoch", "7"},
			wantErr: `cluster "west" (uid uid-east) cannot release the fence: cluster "east" (uid uid-east) holds it at epoch 7`},
		{name: "below the instance's epoch", args: []string{"--cluster", "east", "--cluster-uid", "uid-east", "--epoch", "6", "--instance", "east-1"},
			wantErr: `instance "east-1" of cluster "east" (uid uid-east) cannot release its lease of the fence with epoch 6: it declared epoch 7`},
		{name: "an instance without a lease", args: []string{"--cluster", "east", "--cluster-uid", "uid-east", "--epoch", "7"},
			wantOut: `Instance "" of east holds no lease of the fence of domain default (it never declared, or its lease ended): nothing to release.` + "\n\nDomain:     default\n",
			wantIn:  "east-1    7      ends in 11s"},
		{name: "one of two instances", args: []string{"--cluster", "east", "--cluster-uid", "uid-east", "--epoch", "7", "--instance", "east-1"},
			wantOut: "Released the lease of instance east-1 of east in domain default; 1 other instance(s) of east still hold a lease, and the fence stays with east until each one released or its lease ended.\n\nDomain:     default\n",
			wantIn:  "east-1    7      released by the instance"},
		{name: "the last instance", args: []string{"--cluster", "east", "--cluster-uid", "uid-east", "--epoch", "7", "--instance", "east-2"},
			wantOut: "Released the fence of domain default held by east at epoch 7: no instance of east holds a lease any more.\n\nDomain:     default\n",
			wantIn:  "Lease:      released by every instance of the holder"},
		{name: "again", args: []string{"--cluster", "east", "--cluster-uid", "uid-east", "--epoch", "7", "--instance", "east-2", "-o", "json"},
			wantOut: "{\n  \"domain\": \"default\"", wantIn: `"released": true`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runFence(ctx, clk, append([]string{"release", "--authority", srv.Addr}, tc.args...)...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("release: %v", err)
			}
			if !strings.HasPrefix(out, tc.wantOut) {
				t.Errorf("output\n%s\nwant it to start with\n%s", out, tc.wantOut)
			}
			if !strings.Contains(out, tc.wantIn) {
				t.Errorf("output does not show %q:\n%s", tc.wantIn, out)
			}
		})
	}
}

// syncBuffer is a bytes.Buffer that a command writes while the test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitUntil polls the buffer until cond holds, or fails the test.
func waitUntil(t *testing.T, b *syncBuffer, what string, cond func(out string) bool) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		out := b.String()
		if cond(out) {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited for %s, got:\n%s", what, out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitFor waits until the buffer has n lines and returns them.
func waitFor(t *testing.T, b *syncBuffer, n int) []string {
	t.Helper()
	out := waitUntil(t, b, fmt.Sprintf("%d lines", n), func(out string) bool { return strings.Count(out, "\n") >= n })
	return strings.Split(strings.TrimSuffix(out, "\n"), "\n")
}

func TestFenceWatch(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	srv := authoritytest.Start(t, authoritytest.Options{LeaseTTL: 15 * time.Second, Clock: clk})
	client := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	tests := map[string]struct {
		output string
		check  func(t *testing.T, lines []string)
	}{
		"table": {output: "table", check: func(t *testing.T, lines []string) {
			// The test's client has no certificate: its changes are shown
			// by its address.
			want := []string{
				"2023-11-14T22:13:20Z  snapshot         holder none  pending none",
				"2023-11-14T22:13:20Z  holder_changed   holder east@7 token %d  pending none  by (no identity) PEER via DeclareClusterEpoch",
				"2023-11-14T22:13:22Z  pending_changed  holder east@7 token %d  pending west@8  by (no identity) PEER via DeclareClusterEpoch",
				"2023-11-14T22:13:24Z  released         holder east@7 token %d (released)  pending west@8  by (no identity) PEER via ReleaseFence",
			}
			peer := regexp.MustCompile(`127\.0\.0\.1:\d+`)
			for i, w := range want {
				if strings.Contains(w, "%d") {
					w = fmt.Sprintf(w, eastToken(lines))
				}
				if got := peer.ReplaceAllString(lines[i], "PEER"); got != w {
					t.Errorf("line %d\n  %s\nwant\n  %s", i, lines[i], w)
				}
			}
		}},
		"json": {output: "json", check: func(t *testing.T, lines []string) {
			var types []string
			for _, l := range lines {
				var ev fenceprint.EventView
				if err := json.Unmarshal([]byte(l), &ev); err != nil {
					t.Fatalf("line %q is not JSON: %v", l, err)
				}
				types = append(types, ev.Type)
			}
			if diff := cmp.Diff([]string{"snapshot", "holder_changed", "pending_changed", "released"}, types); diff != "" {
				t.Errorf("event types (-want +got):\n%s", diff)
			}
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			domain := "watch-" + name
			var out, errOut syncBuffer
			cmd := newFenceCommandWithClock(clk)
			cmd.SetOut(&out)
			cmd.SetErr(&errOut)
			cmd.SetArgs([]string{"watch", "--authority", srv.Addr, "--domain", domain, "-o", tc.output})
			watchCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- cmd.ExecuteContext(watchCtx) }()

			clk.SetTime(t0)
			waitFor(t, &out, 1) // the snapshot: the watch is on
			req := func(name string, epoch uint64) *fencev1.DeclareClusterEpochRequest {
				return &fencev1.DeclareClusterEpochRequest{Domain: domain, ClusterName: name, ClusterUid: "uid-" + name, Epoch: epoch}
			}
			if _, err := client.DeclareClusterEpoch(ctx, req("east", 7)); err != nil {
				t.Fatalf("east declares: %v", err)
			}
			waitFor(t, &out, 2)
			clk.Step(2 * time.Second)
			_, _ = client.DeclareClusterEpoch(ctx, req("west", 8))
			waitFor(t, &out, 3)
			clk.Step(2 * time.Second)
			if _, err := client.ReleaseFence(ctx, &fencev1.ReleaseFenceRequest{Domain: domain, ClusterUid: "uid-east", Epoch: 7}); err != nil {
				t.Fatalf("east releases: %v", err)
			}
			tc.check(t, waitFor(t, &out, 4))

			stop()
			if err := <-done; err != nil {
				t.Errorf("watch ended with %v, want nil after Ctrl-C", err)
			}
		})
	}
}

// eastToken finds east's token in a watch line that names it.
func eastToken(lines []string) uint64 {
	for _, l := range lines {
		var token uint64
		if i := strings.Index(l, "token "); i >= 0 {
			if _, err := fmt.Sscan(l[i+len("token "):], &token); err == nil {
				return token
			}
		}
	}
	return 0
}

func TestFenceWatchSurvivesAnAuthorityRestart(t *testing.T) {
	srv := authoritytest.Start(t, authoritytest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out, errOut syncBuffer
	clk := clocktesting.NewFakeClock(t0)
	cmd := newFenceCommandWithClock(clk)
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs([]string{"watch", "--authority", srv.Addr})
	watchCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(watchCtx) }()
	waitFor(t, &out, 1)

	srv.Restart(t)
	if _, err := srv.Client(t).DeclareClusterEpoch(ctx, &fencev1.DeclareClusterEpochRequest{ClusterName: "east", ClusterUid: "uid-east", Epoch: 1}); err != nil {
		t.Fatalf("declare after restart: %v", err)
	}
	// After the restart the watch starts again with a snapshot, which shows
	// east if it is taken after the grant, or is followed by the grant.
	waitUntil(t, &out, "east's grant", func(out string) bool {
		// The watch pauses on its clock before it opens again: move it on.
		if clk.HasWaiters() {
			clk.Step(5 * time.Second)
		}
		return strings.Contains(out, "holder east@1")
	})
	if !strings.Contains(errOut.String(), "unavailable") {
		t.Errorf("the watch did not say the authority went away: %q", errOut.String())
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("watch ended with %v", err)
	}
}

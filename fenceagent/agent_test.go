package fenceagent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/fencestate"
)

const (
	testInterval = 5 * time.Second
	testLease    = 15 * time.Second
	testMargin   = 2 * time.Second
)

// stepUntil moves the fake clock forward by step until cond holds, giving
// the agent a moment of real time after each step; it fails once more than
// limit of fake time has passed.
func (ta *testAgent) stepUntil(t *testing.T, step, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for elapsed := time.Duration(0); ; elapsed += step {
		deadline := time.Now().Add(20 * time.Millisecond)
		for time.Now().Before(deadline) {
			if cond() {
				return
			}
			time.Sleep(time.Millisecond)
		}
		if elapsed >= limit {
			t.Fatalf("%s did not happen within %s of fake time", what, limit)
		}
		ta.clock.Step(step)
	}
}

func (ta *testAgent) declarations(result answerKind) float64 {
	return testutil.ToFloat64(ta.metrics.declarations.WithLabelValues(result.result()))
}

// transitionLogs returns the "to" status of each logged transition, marked
// with the level: "E:" for errors, "I:" for info.
func (ta *testAgent) transitionLogs() []string {
	var out []string
	for _, l := range ta.logs.all() {
		if l.To == "" {
			continue
		}
		if l.Error != "" {
			out = append(out, "E:"+l.To)
		} else {
			out = append(out, "I:"+l.To)
		}
	}
	return out
}

func unavailable() (*fencev1.DeclareClusterEpochResponse, error) {
	return nil, status.Error(codes.Unavailable, "authority restarting")
}

func TestDeclaresAtStartOnIntervalAndOnWatchEvents(t *testing.T) {
	auth, client := newScriptedAuthority(t)
	ta := newTestAgent(t, client, func(o *Options) { o.Domain = "payments" })
	ta.start(t)

	first := auth.next(t)
	want := &fencev1.DeclareClusterEpochRequest{Domain: "payments", ClusterName: testSelf.Name, ClusterUid: testSelf.UID, Epoch: testSelf.Epoch, Instance: testInstance}
	if first.req.GetDomain() != want.Domain || first.req.GetClusterName() != want.ClusterName ||
		first.req.GetClusterUid() != want.ClusterUid || first.req.GetEpoch() != want.Epoch || first.req.GetInstance() != want.Instance {
		t.Fatalf("declaration = %v, want %v", first.req, want)
	}
	first.grant(testLease, 1)
	ta.waitStatus(t, fencestate.Active)
	auth.noDeclaration(t)

	// The next heartbeat comes within the interval (jittered below it).
	ta.stepUntil(t, 100*time.Millisecond, testInterval, "the next heartbeat", func() bool { return len(auth.declares) > 0 })
	auth.next(t).grant(testLease, 1)

	// A watch event makes the agent declare at once, without waiting.
	eventually(t, "the watch is open", func() bool { return auth.watchCount() == 1 })
	auth.events <- &fencev1.WatchFenceResponse{Type: fencev1.FenceEventType_FENCE_EVENT_TYPE_PENDING_CHANGED}
	call := auth.next(t)
	call.answer(nil, refusalErr(rpctypes.ReasonClusterFenced, testSelf, 7, 0))
	ta.waitStatus(t, fencestate.Fenced)
}

// TestStaleResultsAreDropped sends two declarations; the newer is answered
// first, then the older one's answer (or error) arrives and must be ignored.
func TestStaleResultsAreDropped(t *testing.T) {
	tests := map[string]struct {
		stale func(*declareCall)
	}{
		"a late refusal":          {stale: func(c *declareCall) { c.answer(nil, refusalErr(rpctypes.ReasonClusterFenced, testWest, 7, 0)) }},
		"a late unexpected error": {stale: func(c *declareCall) { c.answer(nil, status.Error(codes.Internal, "store failed")) }},
		"a late Unimplemented":    {stale: func(c *declareCall) { c.answer(nil, status.Error(codes.Unimplemented, "old authority")) }},
		"a late transient error":  {stale: func(c *declareCall) { c.answer(unavailable()) }},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			auth, client := newScriptedAuthority(t)
			ta := newTestAgent(t, client, nil)
			ta.startManual(t)

			older := make(chan outcome, 1)
			go func() { older <- ta.declare(context.Background()) }()
			slow := auth.next(t)
			newer := make(chan outcome, 1)
			go func() { newer <- ta.declare(context.Background()) }()
			auth.next(t).grant(testLease, 3)
			if o := <-newer; !o.applied || o.err != nil {
				t.Fatalf("newer declaration: applied=%v err=%v", o.applied, o.err)
			}
			active := ta.Status()
			if active.Status != fencestate.Active {
				t.Fatalf("status after the newer answer = %s, want active", active.Status)
			}

			tc.stale(slow)
			o := <-older
			if o.applied || o.err != nil {
				t.Errorf("older declaration: applied=%v err=%v, want dropped without error", o.applied, o.err)
			}
			if got := ta.Status(); got != active {
				t.Errorf("state changed by a stale result:\n got %+v\nwant %+v", got, active)
			}
			// The initial state, then the newer answer.
			if got := ta.store.statuses(testSelf.Name); !slices.Equal(got, []fencestate.Status{fencestate.Unknown, fencestate.Active}) {
				t.Errorf("store saw %v, want only the initial unknown and active", got)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	t.Run("concurrent callers share one declaration; a cancelled caller returns at once", func(t *testing.T) {
		auth, client := newScriptedAuthority(t)
		ta := newTestAgent(t, client, nil)
		ta.startManual(t)

		type result struct {
			state fencestate.State
			err   error
		}
		results := make([]chan result, 3)
		cancelled, cancel := context.WithCancel(context.Background())
		defer cancel()
		for i := range results {
			ctx := context.Background()
			if i == 2 {
				ctx = cancelled
			}
			results[i] = make(chan result, 1)
			go func() {
				s, err := ta.Check(ctx)
				results[i] <- result{s, err}
			}()
		}
		call := auth.next(t)
		eventually(t, "all callers wait", func() bool { return testutil.ToFloat64(ta.metrics.checkWaiters) == 3 })
		auth.noDeclaration(t)

		cancel()
		r := <-results[2]
		if !errors.Is(r.err, context.Canceled) || r.state.Status != fencestate.Unknown {
			t.Errorf("cancelled caller got (%s, %v), want (unknown, context canceled)", r.state.Status, r.err)
		}
		if call.ctx.Err() != nil {
			t.Fatalf("a caller's cancellation reached the shared declaration: %v", call.ctx.Err())
		}

		call.grant(testLease, 5)
		for i := range 2 {
			if r := <-results[i]; r.err != nil || r.state.Status != fencestate.Active {
				t.Errorf("caller %d got (%s, %v), want (active, nil)", i, r.state.Status, r.err)
			}
		}
		// Once answered, Check returns the state without a call.
		if s, err := ta.Check(context.Background()); err != nil || s.Status != fencestate.Active {
			t.Errorf("Check after the answer = (%s, %v)", s.Status, err)
		}
		auth.noDeclaration(t)
	})

	t.Run("the shared declaration finishes after every caller left", func(t *testing.T) {
		auth, client := newScriptedAuthority(t)
		ta := newTestAgent(t, client, nil)
		ta.startManual(t)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := ta.Check(ctx)
			done <- err
		}()
		call := auth.next(t)
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Check = %v, want context canceled", err)
		}
		call.grant(testLease, 5)
		ta.waitStatus(t, fencestate.Active)
		if last, _ := ta.store.last(testSelf.Name); last.Status != fencestate.Active {
			t.Errorf("store holds %s, want active", last.Status)
		}
	})

	t.Run("the shared declaration is bounded by the declare timeout", func(t *testing.T) {
		auth, client := newScriptedAuthority(t)
		ta := newTestAgent(t, client, func(o *Options) { o.DeclareTimeout = 50 * time.Millisecond })
		ta.startManual(t)
		done := make(chan error, 1)
		go func() {
			_, err := ta.Check(context.Background())
			done <- err
		}()
		call := auth.next(t) // never answered
		err := <-done
		if st, ok := rpctypes.Status(err); !ok || st.Code() != codes.DeadlineExceeded {
			t.Errorf("Check = %v, want DeadlineExceeded", err)
		}
		eventually(t, "the authority sees the call end", func() bool { return call.ctx.Err() != nil })
		if s := ta.Status(); s.Status != fencestate.Unknown {
			t.Errorf("status = %s, want unknown", s.Status)
		}
	})
}

func TestUnimplementedIsUnsupported(t *testing.T) {
	ta := newTestAgent(t, serve(t, nil), nil) // a gRPC server without the fence service
	ta.start(t)
	s := ta.waitStatus(t, fencestate.Unsupported)
	if s.Reason != fencestate.ReasonUnimplemented {
		t.Errorf("reason = %q, want %q", s.Reason, fencestate.ReasonUnimplemented)
	}
	for n := 2.0; n <= 3; n++ {
		ta.stepUntil(t, 500*time.Millisecond, testInterval, "another heartbeat", func() bool { return ta.declarations(unsupported) >= n })
	}
	if got := ta.Status().Status; got != fencestate.Unsupported {
		t.Errorf("status = %s after more heartbeats, want unsupported", got)
	}
	if got := ta.transitionLogs(); !slices.Equal(got, []string{"E:unsupported"}) {
		t.Errorf("transition logs = %v, want one error entering unsupported", got)
	}
	if _, err := ta.Check(context.Background()); !isCode(err, codes.Unimplemented) {
		t.Errorf("Check = %v, want the Unimplemented error", err)
	}
}

func isCode(err error, c codes.Code) bool {
	st, ok := rpctypes.Status(err)
	return ok && st.Code() == c
}

// TestTransientErrorsKeepStatusUntilExpiry: failed calls change nothing, are
// retried with backoff and are not logged; the status lapses to unknown only
// when it expires.
func TestTransientErrorsKeepStatusUntilExpiry(t *testing.T) {
	tests := map[string]struct {
		first      func(*declareCall)
		want       fencestate.Status
		lasts      time.Duration
		wantReason string
		wantLogs   []string
	}{
		"active lasts until send time + lease TTL - margin": {
			first:      func(c *declareCall) { c.grant(testLease, 1) },
			want:       fencestate.Active,
			lasts:      testLease - testMargin,
			wantReason: fencestate.ReasonLeaseExpired,
			wantLogs:   []string{"I:active", "E:unknown"},
		},
		"fenced lasts until three heartbeats without an answer when the lease TTL is unknown": {
			first:      func(c *declareCall) { c.answer(nil, refusalErr(rpctypes.ReasonClusterFenced, testWest, 7, 0)) },
			want:       fencestate.Fenced,
			lasts:      3 * testInterval,
			wantReason: fencestate.ReasonAuthorityUnreachable,
			wantLogs:   []string{"E:fenced", "E:unknown"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			auth, client := newScriptedAuthority(t)
			ta := newTestAgent(t, client, nil)
			start := ta.clock.Now()
			ta.start(t)
			tc.first(auth.next(t))
			before := ta.waitStatus(t, tc.want)

			// A heartbeat fails ...
			ta.stepUntil(t, 100*time.Millisecond, testInterval, "the next heartbeat", func() bool { return len(auth.declares) > 0 })
			auth.next(t).answer(unavailable())
			// ... and is retried well before the next interval.
			ta.stepUntil(t, 50*time.Millisecond, time.Second, "a retry with backoff", func() bool { return len(auth.declares) > 0 })
			auth.next(t).answer(unavailable())
			auth.answerAll(t, func(*fencev1.DeclareClusterEpochRequest) (*fencev1.DeclareClusterEpochResponse, error) {
				return unavailable()
			})

			ta.clock.SetTime(start.Add(tc.lasts - time.Millisecond))
			eventually(t, "more failed calls", func() bool { return ta.declarations(transient) >= 3 })
			if got := ta.Status(); got != before {
				t.Fatalf("status changed before it expired:\n got %+v\nwant %+v", got, before)
			}
			ta.clock.Step(time.Millisecond)
			s := ta.waitStatus(t, fencestate.Unknown)
			if s.Reason != tc.wantReason {
				t.Errorf("reason = %q, want %q", s.Reason, tc.wantReason)
			}
			// The status is published before its transition is logged.
			eventually(t, "the transition is logged", func() bool { return len(ta.transitionLogs()) >= len(tc.wantLogs) })
			if got := ta.transitionLogs(); !slices.Equal(got, tc.wantLogs) {
				t.Errorf("transition logs = %v, want %v", got, tc.wantLogs)
			}
			// Besides the transitions, one line says the authority does
			// not answer: not one per failed call.
			if n := len(ta.logs.all()); n != len(tc.wantLogs)+1 {
				t.Errorf("%d log lines, want the %d transitions and one about the failures: %+v", n, len(tc.wantLogs), ta.logs.all())
			}
			unreachable := slices.ContainsFunc(ta.logs.all(), func(l logLine) bool {
				return strings.HasPrefix(l.Msg, "fence authority does not answer") && strings.Contains(l.Error, "authority restarting")
			})
			if !unreachable {
				t.Errorf("no log line says the authority does not answer: %+v", ta.logs.all())
			}
		})
	}
}

// TestLeaseExpiresWithoutAnyAnswer: the local timer ends an active status
// even when the pending renewal never returns.
func TestLeaseExpiresWithoutAnyAnswer(t *testing.T) {
	auth, client := newScriptedAuthority(t)
	ta := newTestAgent(t, client, func(o *Options) { o.DeclareTimeout = time.Minute; o.DeclareInterval = 2 * time.Minute })
	start := ta.clock.Now()
	ta.start(t)
	auth.next(t).grant(testLease, 1)
	active := ta.waitStatus(t, fencestate.Active)
	if want := start.Add(testLease - testMargin).UnixNano(); active.ValidUntilNS != want {
		t.Fatalf("valid until %d, want %d", active.ValidUntilNS, want)
	}

	// A renewal is sent and hangs (a watch event asks for it).
	eventually(t, "the watch is open", func() bool { return auth.watchCount() == 1 })
	auth.events <- &fencev1.WatchFenceResponse{Type: fencev1.FenceEventType_FENCE_EVENT_TYPE_SNAPSHOT}
	hung := auth.next(t)

	ta.clock.SetTime(start.Add(testLease - testMargin - time.Millisecond))
	if got := ta.Status().Status; got != fencestate.Active {
		t.Fatalf("status = %s before the lease ended", got)
	}
	ta.clock.Step(time.Millisecond)
	s := ta.waitStatus(t, fencestate.Unknown)
	if s.Reason != fencestate.ReasonLeaseExpired || s.ValidUntilNS != 0 || s.Token != 0 {
		t.Errorf("expired state = %+v", s)
	}
	if hung.ctx.Err() != nil {
		t.Errorf("the renewal ended (%v): the test meant it to be pending", hung.ctx.Err())
	}
	if last, _ := ta.store.last(testSelf.Name); last.Status != fencestate.Unknown {
		t.Errorf("store holds %s, want unknown", last.Status)
	}
}

func TestFencedHolderWritesFencedThenReleases(t *testing.T) {
	fenced := func(holder fencestate.Cluster) func(*declareCall) {
		return func(c *declareCall) { c.answer(nil, refusalErr(rpctypes.ReasonClusterFenced, holder, 7, 0)) }
	}
	tests := map[string]struct {
		holder      bool
		refusal     func(*declareCall)
		writeFails  bool
		beforeFails bool // BeforeRelease (the hold's withdrawal) fails
		wantRelease bool
	}{
		"holder told another cluster holds the fence": {
			holder: true, refusal: fenced(testWest), wantRelease: true,
		},
		"holder still named holder while a takeover is pending": {
			holder: true, refusal: fenced(testSelf), wantRelease: true,
		},
		"named holder by the authority although never granted here": {
			refusal: fenced(testSelf), wantRelease: true,
		},
		"never holder": {
			refusal: fenced(testWest), wantRelease: false,
		},
		"fenced could not be written: no release": {
			holder: true, refusal: fenced(testWest), writeFails: true, wantRelease: false,
		},
		"the hold could not be withdrawn: no release": {
			holder: true, refusal: fenced(testWest), beforeFails: true, wantRelease: false,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			auth, client := newScriptedAuthority(t)
			var ta *testAgent
			var storeBefore atomic.Value
			var befores atomic.Int32
			ta = newTestAgent(t, client, func(o *Options) {
				o.BeforeRelease = func(context.Context) error {
					befores.Add(1)
					last, _ := ta.store.last(testSelf.Name)
					storeBefore.Store(last.Status)
					if tc.beforeFails {
						return errors.New("the API server does not answer")
					}
					return nil
				}
			})
			ta.startManual(t)
			var storeAtRelease atomic.Value
			auth.setOnRelease(func(_ context.Context, req *fencev1.ReleaseFenceRequest) error {
				if befores.Load() == 0 {
					t.Error("released before BeforeRelease ran")
				}
				if req.GetClusterUid() != testSelf.UID || req.GetEpoch() != testSelf.Epoch || req.GetDomain() != DefaultDomain || req.GetInstance() != testInstance {
					t.Errorf("release request = %v", req)
				}
				last, _ := ta.store.last(testSelf.Name)
				storeAtRelease.Store(last.Status)
				return nil
			})
			declare := func(answer func(*declareCall)) {
				done := make(chan outcome, 1)
				go func() { done <- ta.declare(context.Background()) }()
				answer(auth.next(t))
				<-done
			}
			if tc.holder {
				declare(func(c *declareCall) { c.grant(testLease, 1) })
			}
			if tc.writeFails {
				ta.writer.failWith(errStoreDown)
			}
			declare(tc.refusal)

			if got := auth.releaseCount(); (got == 1) != tc.wantRelease || got > 1 {
				t.Fatalf("%d releases, want release=%v", got, tc.wantRelease)
			}
			if tc.wantRelease && storeAtRelease.Load() != fencestate.Fenced {
				t.Errorf("store held %v when the release was sent, want fenced", storeAtRelease.Load())
			}
			if (tc.wantRelease || tc.beforeFails) && storeBefore.Load() != fencestate.Fenced {
				t.Errorf("store held %v when BeforeRelease ran, want fenced", storeBefore.Load())
			}
			if !tc.writeFails {
				return
			}
			// Once the store works again, the next refusal writes and
			// releases.
			ta.writer.failWith(nil)
			declare(tc.refusal)
			if got := auth.releaseCount(); got != 1 {
				t.Errorf("%d releases after the store recovered, want 1", got)
			}
		})
	}

	t.Run("a failed release is retried on the next refusal, a done one is not repeated", func(t *testing.T) {
		auth, client := newScriptedAuthority(t)
		ta := newTestAgent(t, client, nil)
		ta.startManual(t)
		var fail atomic.Bool
		fail.Store(true)
		auth.setOnRelease(func(context.Context, *fencev1.ReleaseFenceRequest) error {
			if fail.Load() {
				return status.Error(codes.Unavailable, "down")
			}
			return nil
		})
		declare := func(answer func(*declareCall)) {
			done := make(chan outcome, 1)
			go func() { done <- ta.declare(context.Background()) }()
			answer(auth.next(t))
			<-done
		}
		declare(func(c *declareCall) { c.grant(testLease, 1) })
		declare(fenced(testWest))
		fail.Store(false)
		declare(fenced(testWest))
		declare(fenced(testWest))
		if got := auth.releaseCount(); got != 2 {
			t.Errorf("%d releases, want 2 (one failed, one done)", got)
		}
	})
}

// TestGrantsAnsweredBeforeTheReleaseAreVoid: two declarations are out
// when the older is told CLUSTER_FENCED and the agent releases. The newer
// may have been answered before the release was taken in (by a replica
// that had not yet seen the takeover, or from its cached record): its grant
// names a lease the release gave up, and must not make the agent active
// again, whether it arrives while the release is out or after it ended. A
// declaration sent after the release ended is answered after it, and its
// grant holds.
func TestGrantsAnsweredBeforeTheReleaseAreVoid(t *testing.T) {
	tests := map[string]struct {
		// grantWhileReleasing answers the newer declaration while the
		// release is out; otherwise once it ended.
		grantWhileReleasing bool
		releaseErr          error
	}{
		"granted while the release is out":    {grantWhileReleasing: true},
		"granted after the release ended":     {},
		"granted after a release that failed": {releaseErr: status.Error(codes.Unavailable, "down")},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			auth, client := newScriptedAuthority(t)
			ta := newTestAgent(t, client, nil)
			ta.startManual(t)
			// The first release waits for the test; the one at the
			// agent's stop does not.
			releasing, release := make(chan struct{}), make(chan struct{})
			var releases atomic.Int32
			auth.setOnRelease(func(context.Context, *fencev1.ReleaseFenceRequest) error {
				if releases.Add(1) > 1 {
					return nil
				}
				close(releasing)
				<-release
				return tc.releaseErr
			})
			declare := func() <-chan outcome {
				done := make(chan outcome, 1)
				go func() { done <- ta.declare(context.Background()) }()
				return done
			}
			first := declare()
			auth.next(t).grant(testLease, 1)
			<-first

			older := declare()
			olderCall := auth.next(t)
			newer := declare()
			newerCall := auth.next(t)
			olderCall.answer(nil, refusalErr(rpctypes.ReasonClusterFenced, testWest, 7, 0))
			<-releasing
			// The refusal's asker hears of it once the release ended.
			var olderOutcome, newerOutcome outcome
			if tc.grantWhileReleasing {
				newerCall.grant(testLease, 1)
				newerOutcome = <-newer
				close(release)
				olderOutcome = <-older
			} else {
				close(release)
				olderOutcome = <-older
				newerCall.grant(testLease, 1)
				newerOutcome = <-newer
			}
			if !olderOutcome.applied {
				t.Errorf("the refusal was not applied: %+v", olderOutcome)
			}
			if newerOutcome.applied || newerOutcome.err != nil {
				t.Errorf("the grant to the declaration sent before the release ended: applied=%v err=%v, want void without error", newerOutcome.applied, newerOutcome.err)
			}
			if got := ta.Status(); got.Status != fencestate.Fenced {
				t.Fatalf("status after a grant that the release voided = %s, want fenced", got.Status)
			}
			if got := ta.store.statuses(testSelf.Name); !slices.Equal(got, []fencestate.Status{fencestate.Unknown, fencestate.Active, fencestate.Fenced}) {
				t.Errorf("store saw %v, want unknown, active, fenced", got)
			}
			ignored := 0
			for _, l := range ta.logs.all() {
				if strings.HasPrefix(l.Msg, "fence grant ignored") {
					ignored++
				}
			}
			if ignored != 1 {
				t.Errorf("%d log lines say a grant was ignored, want 1", ignored)
			}

			// The fence comes back: a declaration sent now is answered
			// after the release.
			after := declare()
			auth.next(t).grant(testLease, 9)
			if o := <-after; !o.applied || ta.Status().Status != fencestate.Active || ta.Status().Token != 9 {
				t.Errorf("a grant to a declaration sent after the release: applied=%v, status %+v; want active with token 9", o.applied, ta.Status())
			}
		})
	}
}

// TestTransitionsLogAndSignalOnce: heartbeats that change nothing log
// nothing and signal nothing; each transition logs once at its level.
func TestTransitionsLogAndSignalOnce(t *testing.T) {
	auth, client := newScriptedAuthority(t)
	ta := newTestAgent(t, client, nil)
	var fenced atomic.Bool
	auth.answerAll(t, func(req *fencev1.DeclareClusterEpochRequest) (*fencev1.DeclareClusterEpochResponse, error) {
		if fenced.Load() {
			return nil, refusalErr(rpctypes.ReasonClusterFenced, testWest, 7, 0)
		}
		return grantResp(req, testLease, 1)
	})
	ta.start(t)
	ta.waitStatus(t, fencestate.Active)
	heartbeats := func(kind answerKind) {
		for range 3 {
			n := ta.declarations(kind) + 1
			ta.stepUntil(t, 200*time.Millisecond, testInterval, "a heartbeat", func() bool { return ta.declarations(kind) >= n })
		}
	}
	heartbeats(granted)
	fenced.Store(true)
	ta.stepUntil(t, 200*time.Millisecond, testInterval, "fenced", func() bool { return ta.Status().Status == fencestate.Fenced })
	heartbeats(refusedFenced)

	if got, want := ta.transitionLogs(), []string{"I:active", "E:fenced"}; !slices.Equal(got, want) {
		t.Errorf("transition logs = %v, want %v", got, want)
	}
	if n := len(ta.logs.all()); n != 3 { // the two transitions and the release
		t.Errorf("%d log lines, want 3: %+v", n, ta.logs.all())
	}
	for _, tr := range []struct{ from, to fencestate.Status }{{fencestate.Unknown, fencestate.Active}, {fencestate.Active, fencestate.Fenced}} {
		if got := testutil.ToFloat64(ta.metrics.transitions.WithLabelValues(string(tr.from), string(tr.to))); got != 1 {
			t.Errorf("transitions %s→%s = %v, want 1", tr.from, tr.to, got)
		}
	}
	if got := testutil.ToFloat64(ta.metrics.status.WithLabelValues(string(fencestate.Fenced))); got != 1 {
		t.Errorf("status gauge for fenced = %v, want 1", got)
	}
	if got := testutil.ToFloat64(ta.metrics.status.WithLabelValues(string(fencestate.Active))); got != 0 {
		t.Errorf("status gauge for active = %v, want 0", got)
	}
	// Two transitions with nobody reading coalesce into one signal.
	select {
	case <-ta.signals:
	default:
		t.Fatal("no change signalled")
	}
	select {
	case <-ta.signals:
		t.Error("a second signal for transitions that were already signalled")
	default:
	}
}

var testNorth = fencestate.Cluster{Name: "north", UID: "uid-north", Epoch: 9}

func TestSubscribersHearEveryTransition(t *testing.T) {
	auth, client := newScriptedAuthority(t)
	ta := newTestAgent(t, client, nil)
	ta.startManual(t)
	// The initial state's write signals nothing: it is no transition.
	eventually(t, "data.fence is written", func() bool { _, ok := ta.store.last(testSelf.Name); return ok })
	declare := func(answer func(*declareCall)) {
		done := make(chan outcome, 1)
		go func() { done <- ta.declare(context.Background()) }()
		answer(auth.next(t))
		<-done
	}
	signalled := func() bool {
		select {
		case <-ta.signals:
			return true
		default:
			return false
		}
	}
	steps := []struct {
		answer func(*declareCall)
		signal bool
	}{
		{func(c *declareCall) { c.grant(testLease, 1) }, true},
		{func(c *declareCall) { c.grant(testLease, 1) }, false}, // a renewal is no transition
		{func(c *declareCall) { c.answer(unavailable()) }, false},
		{func(c *declareCall) { c.answer(nil, refusalErr(rpctypes.ReasonAcquiring, testWest, 7, time.Second)) }, true},
		{func(c *declareCall) { c.answer(nil, refusalErr(rpctypes.ReasonEpochRegressed, testWest, 7, 0)) }, true},
		{func(c *declareCall) { c.answer(nil, refusalErr(rpctypes.ReasonClusterFenced, testWest, 7, 0)) }, true},
		{func(c *declareCall) { c.answer(nil, refusalErr(rpctypes.ReasonClusterFenced, testWest, 7, 0)) }, false},
		// The fence moved to another cluster while this one stays fenced:
		// what the Components say about the holder must follow.
		{func(c *declareCall) { c.answer(nil, refusalErr(rpctypes.ReasonClusterFenced, testNorth, 7, 0)) }, true},
	}
	for i, s := range steps {
		declare(s.answer)
		if got := signalled(); got != s.signal {
			t.Errorf("step %d: signalled = %v, want %v", i, got, s.signal)
		}
	}
	// An epoch raised while the status stays: nothing changes before its
	// answer, which names the new epoch and is signalled, so that the
	// Fence and the Components follow.
	raised := testSelf.Epoch + 1
	if err := ta.SetEpoch(context.Background(), raised); err != nil {
		t.Fatal(err)
	}
	if signalled() || ta.Status().Cluster.Epoch != testSelf.Epoch {
		t.Errorf("SetEpoch changed the state before any answer to epoch %d: %+v", raised, ta.Status())
	}
	auth.next(t).answer(nil, refusalErr(rpctypes.ReasonClusterFenced, testNorth, raised, 0))
	eventually(t, "the answer to the raised epoch is signalled", signalled)
	if s := ta.Status(); s.Status != fencestate.Fenced || s.Cluster.Epoch != raised {
		t.Errorf("after the answer to epoch %d: %s at epoch %d", raised, s.Status, s.Cluster.Epoch)
	}
}

func TestAcquiringAsksAgainAfterRetryAfter(t *testing.T) {
	auth, client := newScriptedAuthority(t)
	ta := newTestAgent(t, client, nil)
	ta.start(t)
	auth.next(t).answer(nil, refusalErr(rpctypes.ReasonAcquiring, testWest, 7, time.Second))
	ta.waitStatus(t, fencestate.Acquiring)
	// The holder's lease ends in a second: the agent asks again then,
	// not at the next heartbeat.
	ta.stepUntil(t, 100*time.Millisecond, 2*time.Second, "a declaration after retry_after", func() bool { return len(auth.declares) > 0 })
	if elapsed := ta.clock.Since(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)); elapsed < time.Second {
		t.Errorf("asked again after %s, before retry_after", elapsed)
	}
	auth.next(t).grant(testLease, 2)
	ta.waitStatus(t, fencestate.Active)
}

func TestWatchReconnectsWithBackoff(t *testing.T) {
	auth, client := newScriptedAuthority(t)
	auth.watchErrs <- status.Error(codes.Unavailable, "authority restarting")
	auth.watchErrs <- status.Error(codes.Unavailable, "authority restarting")
	ta := newTestAgent(t, client, nil)
	ta.start(t)
	auth.next(t).grant(testLease, 1)
	ta.waitStatus(t, fencestate.Active)

	ta.stepUntil(t, 50*time.Millisecond, 2*time.Second, "the watch is opened again", func() bool { return auth.watchCount() == 3 })
	if got := testutil.ToFloat64(ta.metrics.watchRetries); got != 2 {
		t.Errorf("watch reconnects = %v, want 2", got)
	}
	auth.noDeclaration(t)
	auth.events <- &fencev1.WatchFenceResponse{Type: fencev1.FenceEventType_FENCE_EVENT_TYPE_SNAPSHOT}
	auth.next(t).grant(testLease, 1)
	if got := ta.transitionLogs(); !slices.Equal(got, []string{"I:active"}) {
		t.Errorf("transition logs = %v: failed watch opens must not be logged", got)
	}
}

func TestStartWritesTheInitialStateAndStartsOnce(t *testing.T) {
	_, client := newScriptedAuthority(t)
	ta := newTestAgent(t, client, nil)
	ta.start(t)
	eventually(t, "data.fence is written", func() bool { _, ok := ta.store.last(testSelf.Name); return ok })
	s, _ := ta.store.last(testSelf.Name)
	if s.Status != fencestate.Unknown || s.Reason != fencestate.ReasonNoAnswerYet || s.Cluster != testSelf || s.Domain != DefaultDomain {
		t.Errorf("initial data.fence = %+v", s)
	}
	if err := ta.Start(context.Background()); err == nil {
		t.Error("a second Start succeeded")
	}
}

// TestRenewalFollowsTheLease: the agent renews at the earlier of the
// declare interval and a third of lease TTL − margin, so that an authority
// with a short lease does not make the holder lapse between heartbeats; a
// lease no longer than the margin cannot be held at all, which it logs once.
func TestRenewalFollowsTheLease(t *testing.T) {
	tests := map[string]struct {
		lease time.Duration
		// renewWithin bounds the wait for the next heartbeat.
		renewWithin time.Duration
		wantStatus  fencestate.Status
		wantWarn    bool
	}{
		"a long lease renews every interval":                 {lease: testLease, renewWithin: testInterval, wantStatus: fencestate.Active},
		"a short lease renews at a third of its usable part": {lease: 3 * time.Second, renewWithin: time.Second / 3, wantStatus: fencestate.Active},
		"a lease no longer than the margin cannot be held":   {lease: testMargin, renewWithin: testInterval, wantStatus: fencestate.Unknown, wantWarn: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			auth, client := newScriptedAuthority(t)
			ta := newTestAgent(t, client, nil)
			ta.start(t)
			for i := range 3 {
				auth.next(t).grant(tc.lease, 1)
				ta.waitStatus(t, tc.wantStatus)
				ta.stepUntil(t, tc.renewWithin/50, tc.renewWithin, fmt.Sprintf("renewal %d", i), func() bool { return len(auth.declares) > 0 })
			}
			auth.next(t).grant(tc.lease, 1)
			warnings := 0
			for _, l := range ta.logs.all() {
				if strings.Contains(l.Msg, "fence lease too short to hold") {
					warnings++
				}
			}
			if want := map[bool]int{true: 1, false: 0}[tc.wantWarn]; warnings != want {
				t.Errorf("%d warnings, want %d", warnings, want)
			}
		})
	}
}

// TestStopWritesUnknownThenReleasesTheLease: when Start's context ends, the
// agent first writes a status that admits nothing, and only then gives this
// instance's lease up, within a short timeout of its own.
func TestStopWritesUnknownThenReleasesTheLease(t *testing.T) {
	tests := map[string]struct {
		first func(*declareCall)
		// release answers the release; nil answers OK.
		release    func(context.Context) error
		writeFails bool

		wantRelease bool
		// wantLog is a log line that must be there; noLog one that must not.
		wantLog, noLog string
	}{
		"an active holder": {
			first: func(c *declareCall) { c.grant(testLease, 1) }, wantRelease: true,
			wantLog: "fence agent stopped and released this instance's lease",
		},
		"a fenced cluster: the authority has no lease to release": {
			first:   func(c *declareCall) { c.answer(nil, refusalErr(rpctypes.ReasonClusterFenced, testWest, 7, 0)) },
			release: func(context.Context) error { return refusalErr(rpctypes.ReasonClusterFenced, testWest, 7, 0) }, wantRelease: true,
			noLog: "could not release",
		},
		"the authority does not answer the release: the agent stops after the release timeout": {
			first:   func(c *declareCall) { c.grant(testLease, 1) },
			release: func(ctx context.Context) error { <-ctx.Done(); return status.FromContextError(ctx.Err()).Err() }, wantRelease: true,
			wantLog: "could not release this instance's lease",
		},
		"the store does not take the shutdown status: no release": {
			first: func(c *declareCall) { c.grant(testLease, 1) }, writeFails: true,
			wantLog: "stops without releasing its lease",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			auth, client := newScriptedAuthority(t)
			ta := newTestAgent(t, client, nil)
			var atRelease atomic.Value
			var deadline atomic.Int64
			auth.setOnRelease(func(ctx context.Context, req *fencev1.ReleaseFenceRequest) error {
				if req.GetInstance() != testInstance || req.GetClusterUid() != testSelf.UID || req.GetEpoch() != testSelf.Epoch {
					t.Errorf("release request = %v", req)
				}
				last, _ := ta.store.last(testSelf.Name)
				atRelease.Store(last)
				if d, ok := ctx.Deadline(); ok {
					deadline.Store(int64(time.Until(d)))
				}
				if tc.release != nil {
					return tc.release(ctx)
				}
				return nil
			})
			stop := ta.start(t)
			tc.first(auth.next(t))
			eventually(t, "the answer is applied", func() bool { return ta.Status().Reason != fencestate.ReasonNoAnswerYet })
			if tc.writeFails {
				ta.writer.failWith(errStoreDown)
			}
			stop()

			if s := ta.Status(); s.Status != fencestate.Unknown || s.Reason != fencestate.ReasonShuttingDown || !strings.Contains(s.Message, testInstance) {
				t.Errorf("status after stop = %+v, want unknown (%s) naming the instance", s, fencestate.ReasonShuttingDown)
			}
			if got := auth.releaseCount(); (got == 1) != tc.wantRelease || got > 1 {
				t.Fatalf("%d releases, want release=%v", got, tc.wantRelease)
			}
			if tc.wantRelease {
				if s, _ := atRelease.Load().(fencestate.State); s.Status != fencestate.Unknown || s.Reason != fencestate.ReasonShuttingDown {
					t.Errorf("the store held %s (%s) when the release was sent, want unknown (%s)", s.Status, s.Reason, fencestate.ReasonShuttingDown)
				}
				if d := time.Duration(deadline.Load()); d <= 0 || d > finalReleaseTimeout {
					t.Errorf("the release had %s left, want a deadline within %s", d, finalReleaseTimeout)
				}
			}
			hasLog := func(part string) bool {
				return slices.ContainsFunc(ta.logs.all(), func(l logLine) bool { return strings.Contains(l.Msg, part) })
			}
			if tc.wantLog != "" && !hasLog(tc.wantLog) {
				t.Errorf("no log line says %q: %+v", tc.wantLog, ta.logs.all())
			}
			if tc.noLog != "" && hasLog(tc.noLog) {
				t.Errorf("a log line says %q: %+v", tc.noLog, ta.logs.all())
			}
		})
	}
}

// TestStopWaitsForTheSharedDeclaration: a declaration Check waits for may
// still be out when the agent stops. Its answer must not overwrite the
// shutdown status, and the release must come only after it ended, or the
// authority could renew the lease just released.
func TestStopWaitsForTheSharedDeclaration(t *testing.T) {
	auth, client := newScriptedAuthority(t)
	ta := newTestAgent(t, client, nil)
	stop := ta.start(t)
	shared := auth.next(t) // the first heartbeat: never answered

	checked := make(chan error, 1)
	go func() {
		_, err := ta.Check(context.Background())
		checked <- err
	}()
	eventually(t, "Check waits", func() bool { return testutil.ToFloat64(ta.metrics.checkWaiters) == 1 })
	auth.noDeclaration(t)
	var callOutAtRelease, statusAtRelease atomic.Value
	auth.setOnRelease(func(context.Context, *fencev1.ReleaseFenceRequest) error {
		callOutAtRelease.Store(shared.ctx.Err() == nil)
		last, _ := ta.store.last(testSelf.Name)
		statusAtRelease.Store(last.Reason)
		return nil
	})
	stop()

	if err := <-checked; !errors.Is(err, ErrStopped) {
		t.Errorf("Check = %v, want ErrStopped", err)
	}
	if n := auth.releaseCount(); n != 1 {
		t.Errorf("%d releases, want 1", n)
	}
	if out, _ := callOutAtRelease.Load().(bool); out {
		t.Error("the release was sent while the shared declaration was still out")
	}
	if reason, _ := statusAtRelease.Load().(string); reason != fencestate.ReasonShuttingDown {
		t.Errorf("the store held reason %q at the release, want %s", reason, fencestate.ReasonShuttingDown)
	}
	shared.grant(testLease, 4) // too late: the call has ended
	if s := ta.Status(); s.Reason != fencestate.ReasonShuttingDown {
		t.Errorf("status after stop = %s (%s), want unknown (%s)", s.Status, s.Reason, fencestate.ReasonShuttingDown)
	}
	if slices.Contains(ta.store.statuses(testSelf.Name), fencestate.Active) {
		t.Errorf("the late grant was written: %v", ta.store.statuses(testSelf.Name))
	}
	// A stopped agent declares no more.
	if _, err := ta.Check(context.Background()); !errors.Is(err, ErrStopped) {
		t.Errorf("Check after stop = %v, want ErrStopped", err)
	}
	auth.noDeclaration(t)
}

// TestSetEpoch: raising the epoch of a running agent declares it at once,
// without a restart; a lower epoch is refused; late refusals of the old
// epoch are dropped; the release names the epoch declared last.
func TestSetEpoch(t *testing.T) {
	auth, client := newScriptedAuthority(t)
	ta := newTestAgent(t, client, nil)
	var released atomic.Uint64
	auth.setOnRelease(func(_ context.Context, req *fencev1.ReleaseFenceRequest) error {
		released.Store(req.GetEpoch())
		return nil
	})
	stop := ta.start(t)
	old := auth.next(t) // epoch 7, answered late
	if err := ta.SetEpoch(context.Background(), 9); err != nil {
		t.Fatal(err)
	}
	raised := auth.next(t)
	if got := raised.req.GetEpoch(); got != 9 {
		t.Fatalf("the declaration after SetEpoch(9) has epoch %d", got)
	}
	if s := ta.Status(); s.Cluster.Epoch != 7 {
		t.Errorf("before any answer to epoch 9 the state names epoch %d, want 7, the epoch of its answer", s.Cluster.Epoch)
	}
	raised.grant(testLease, 4)
	ta.waitStatus(t, fencestate.Active)
	old.answer(nil, refusalErr(rpctypes.ReasonClusterFenced, testWest, 8, 0))
	eventually(t, "the late refusal is counted", func() bool { return ta.declarations(refusedFenced) == 1 })
	if s := ta.Status(); s.Status != fencestate.Active || s.Cluster.Epoch != 9 {
		t.Errorf("status after a late refusal of epoch 7 = %s at epoch %d, want active at 9", s.Status, s.Cluster.Epoch)
	}
	if err := ta.SetEpoch(context.Background(), 8); err == nil || !strings.Contains(err.Error(), "an epoch only rises") {
		t.Errorf("SetEpoch(8) after 9 = %v, want a refusal", err)
	}
	if err := ta.SetEpoch(context.Background(), 9); err != nil {
		t.Errorf("SetEpoch(9) again = %v, want nothing to do", err)
	}
	auth.noDeclaration(t)
	stop()
	if got := released.Load(); got != 9 {
		t.Errorf("released at epoch %d, want 9", got)
	}
	if err := ta.SetEpoch(context.Background(), 10); !errors.Is(err, ErrStopped) {
		t.Errorf("SetEpoch after stop = %v, want ErrStopped", err)
	}
}

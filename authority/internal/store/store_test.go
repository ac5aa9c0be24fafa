package store

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	clientv3 "go.etcd.io/etcd/client/v3"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fencegate/fencegate/authority/etcdbackend"
	"github.com/fencegate/fencegate/authority/statemachine"
)

func embeddedEtcd(t *testing.T) *clientv3.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := etcdbackend.StartEmbedded(ctx, etcdbackend.EmbeddedOptions{Dir: t.TempDir(), Logger: testr.NewWithInterface(t, testr.Options{})})
	if err != nil {
		t.Fatalf("start embedded etcd: %v", err)
	}
	t.Cleanup(e.Close)
	return e.Client()
}

func newStore(t *testing.T, client *clientv3.Client, reg prometheus.Registerer) *Store {
	t.Helper()
	s, err := New(client, Options{LeaseTTL: time.Minute, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func decl(name string, epoch uint64) statemachine.Declaration {
	return statemachine.Declaration{Cluster: statemachine.Identity{Name: name, UID: "uid-" + name}, Epoch: epoch}
}

func rel(name string, epoch uint64) statemachine.Release {
	return statemachine.Release{ClusterUID: "uid-" + name, Epoch: epoch}
}

// declareIn makes d in domain default through s and fails t unless it is
// answered want.
func declareIn(ctx context.Context, t *testing.T, s *Store, d statemachine.Declaration, want statemachine.Outcome) {
	t.Helper()
	r, err := s.Declare(ctx, "default", d, Actor{})
	if err != nil {
		t.Fatalf("%s declares %d: %v", d.Cluster.Name, d.Epoch, err)
	}
	if r.Answer.Outcome != want {
		t.Fatalf("%s declares %d: %s, want %s", d.Cluster.Name, d.Epoch, r.Answer.Outcome, want)
	}
}

// TestReplicasNeverAnswerFromAStaleRecord has two stores over one etcd, as
// two authority replicas: each caches the record it last wrote, and must
// notice when the other changed it since, for answers that write and for
// releases that do not (declarations that do not: see
// TestDeclarationsThatChangeNothingWriteNothing).
func TestReplicasNeverAnswerFromAStaleRecord(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := embeddedEtcd(t)
	regA := prometheus.NewRegistry()
	a, b := newStore(t, client, regA), newStore(t, client, nil)

	mustRelease := func(s *Store, r statemachine.Release, want statemachine.ReleaseOutcome) {
		t.Helper()
		res, _, err := s.Release(ctx, "default", r, Actor{})
		if err != nil {
			t.Fatalf("release by %s: %v", r.ClusterUID, err)
		}
		if res.Outcome != want {
			t.Fatalf("release by %s: %s, want %s", r.ClusterUID, res.Outcome, want)
		}
	}

	declareIn(ctx, t, a, decl("east", 1), statemachine.Granted)
	// Through b, west asks to take over: a's cached record has no pending
	// takeover, but east must be fenced.
	declareIn(ctx, t, b, decl("west", 2), statemachine.Acquiring)
	declareIn(ctx, t, a, decl("east", 1), statemachine.Fenced)
	// Through b, east releases and west takes over. a still caches east as
	// the holder: a release by east that changes nothing in a's copy must
	// still be refused.
	mustRelease(b, rel("east", 1), statemachine.Released)
	declareIn(ctx, t, b, decl("west", 2), statemachine.Granted)
	mustRelease(a, rel("east", 1), statemachine.NotHolder)

	if got := testutil.ToFloat64(a.metrics.retries.WithLabelValues("conflict")); got != 2 {
		t.Errorf("store a retried %v times after conflicts, want 2", got)
	}
}

// TestDeclarationsThatChangeNothingWriteNothing: a standby's declarations
// within the resolution of its last-declared time reach etcd as a read
// that checks the record is current, not as a write; while the store
// watches the domain, not at all within cachedAnswerFor of the last such
// check. An answer from a record another replica changed is not given
// once the watch saw the change.
func TestDeclarationsThatChangeNothingWriteNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := embeddedEtcd(t)
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	a, err := New(client, Options{LeaseTTL: time.Hour, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	b := newStore(t, client, nil)
	revision := func() int64 {
		t.Helper()
		resp, err := client.Get(ctx, "any")
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	checked := func() uint64 {
		t.Helper()
		var m dto.Metric
		if err := a.metrics.txnDuration.WithLabelValues("checked").(prometheus.Histogram).Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetHistogram().GetSampleCount()
	}

	declareIn(ctx, t, a, decl("east", 1), statemachine.Granted)
	declareIn(ctx, t, a, decl("west", 1), statemachine.Fenced) // its first: written
	before := revision()
	// Unwatched: each one checked.
	for range 5 {
		declareIn(ctx, t, a, decl("west", 1), statemachine.Fenced)
	}
	if got := checked(); got != 5 {
		t.Errorf("unwatched: %d transactions counted as checked, want the 5 that wrote nothing", got)
	}
	// Watched: checked once cachedAnswerFor passed since the last check,
	// else answered from the cache.
	heard := make(chan int64, 10)
	watchCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		_ = a.Watch(watchCtx, "default", func(ev Event) error {
			heard <- ev.Snapshot.Revision
			return nil
		})
	}()
	<-heard // the snapshot it starts with
	// Watch hands fn the snapshot before it joins the domain's etcd watch.
	waitUntil(ctx, t, "the store watches the domain", func() bool { return a.watching("default") })
	for range 5 {
		clk.Step(cachedAnswerFor)
		declareIn(ctx, t, a, decl("west", 1), statemachine.Fenced)
		declareIn(ctx, t, a, decl("west", 1), statemachine.Fenced)
	}
	if got := revision(); got != before {
		t.Fatalf("15 declarations that changed nothing moved etcd's revision from %d to %d", before, got)
	}
	if got := checked(); got != 10 {
		t.Errorf("watched: %d transactions counted as checked, want 5 more", got)
	}
	if got := testutil.ToFloat64(a.metrics.cachedAnswers); got != 5 {
		t.Errorf("%v declarations answered from the cache, want 5", got)
	}
	// Once the recorded time is as old as the resolution, it is written.
	clk.Step(statemachine.DefaultDeclaredAtResolution)
	declareIn(ctx, t, a, decl("west", 1), statemachine.Fenced)
	if got := revision(); got != before+1 {
		t.Fatalf("after the resolution, etcd's revision went from %d to %d, want one write", before, got)
	}
	snap, err := a.Get(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := snap.State.Clusters["uid-west"].LastDeclaredAt, statemachine.At(clk.Now()); got != want {
		t.Errorf("west last declared at %d, want %d", got, want)
	}
	// Through b, west raises its epoch. a caches west at epoch 1, where a
	// repeat changes nothing; once a's watch saw b's change, a answers
	// from the record b wrote, in which epoch 1 is a regression.
	declareIn(ctx, t, b, decl("west", 2), statemachine.Acquiring)
	<-heard
	declareIn(ctx, t, a, decl("west", 1), statemachine.Regressed)
}

// TestWatchCatchesUpAfterCompaction makes the etcd watch start below the
// compacted revision, as for a watcher that fell far behind: the store reads
// the fence again and reports what changed as one event.
func TestWatchCatchesUpAfterCompaction(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := embeddedEtcd(t)
	s := newStore(t, client, nil)
	if _, err := s.Declare(ctx, "default", decl("east", 1), Actor{}); err != nil {
		t.Fatal(err)
	}

	events := make(chan Event, 10)
	watchCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- s.Watch(watchCtx, "default", func(ev Event) error {
			if len(ev.Types) == 0 {
				// While the snapshot is being delivered, the fence changes
				// hands and etcd compacts away the history of the change.
				if _, _, err := s.Release(ctx, "default", rel("east", 1), Actor{}); err != nil {
					return err
				}
				r, err := s.Declare(ctx, "default", decl("west", 2), Actor{})
				if err != nil {
					return err
				}
				if _, err := client.Compact(ctx, int64(r.State.Holder.Token)); err != nil {
					return err
				}
			}
			events <- ev
			return nil
		})
	}()

	want := []struct {
		types  []statemachine.EventType
		holder string
	}{
		{nil, "east"},
		{[]statemachine.EventType{statemachine.HolderChanged}, "west"},
	}
	for i, w := range want {
		select {
		case ev := <-events:
			if got := ev.Snapshot.State.Holder.Name; got != w.holder || !equalTypes(ev.Types, w.types) {
				t.Errorf("event %d: %v holder %s, want %v holder %s", i, ev.Types, got, w.types, w.holder)
			}
		case err := <-done:
			t.Fatalf("watch ended: %v", err)
		case <-ctx.Done():
			t.Fatalf("event %d never came", i)
		}
	}
	stop()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("watch ended with %v, want context.Canceled", err)
	}
}

func equalTypes(a, b []statemachine.EventType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestUnreadableRecords(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := embeddedEtcd(t)
	s := newStore(t, client, nil)
	if _, err := s.Declare(ctx, "default", decl("east", 1), Actor{}); err != nil {
		t.Fatal(err)
	}
	good, err := client.Get(ctx, s.domainPrefix("default"), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}

	tests := map[string]struct {
		state, grant string // values to put; "" deletes the key
		wantErr      string
	}{
		"not JSON": {
			state: "{", grant: "keep", wantErr: "decode fence record /fencegate/fences/other/state",
		},
		"newer schema": {
			state: `{"version":2}`, grant: "keep", wantErr: "fence record /fencegate/fences/other/state has version 2; this authority reads version 1",
		},
		"holder without grant": {
			state: "keep", grant: "", wantErr: `fence record of domain "other" has a holder but no grant key /fencegate/fences/other/grant`,
		},
		"grant of another cluster": {
			state: "keep", grant: `{"version":1,"uid":"uid-west","granted_at_ns":1}`, wantErr: `does not match the holder in the fence record (uid "uid-east"`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			put := func(key, value, original string) {
				switch value {
				case "":
					_, err = client.Delete(ctx, key)
				case "keep":
					_, err = client.Put(ctx, key, original)
				default:
					_, err = client.Put(ctx, key, value)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			put(s.stateKey("other"), tc.state, string(good.Kvs[1].Value))
			put(s.grantKey("other"), tc.grant, string(good.Kvs[0].Value))
			if _, err := s.Get(ctx, "other"); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("get: %v, want an error containing %q", err, tc.wantErr)
			}
			if _, err := s.Declare(ctx, "other", statemachine.Declaration{Cluster: statemachine.Identity{Name: "west", UID: "uid-west"}, Epoch: 9}, Actor{}); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("declare: %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestRecordsWithoutInstances reads a record written before instances had
// leases of their own: its holder's lease is the lease of instance "", so
// the clients that name no instance renew and release it as before, and
// the lease still holds off a takeover when new clients declare.
func TestRecordsWithoutInstances(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := embeddedEtcd(t)
	start := time.Unix(1_700_000_000, 0)
	clk := clocktesting.NewFakeClock(start.Add(5 * time.Second))
	s, err := New(client, Options{LeaseTTL: 15 * time.Second, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	acquired, expires := start.UnixNano(), start.Add(15*time.Second).UnixNano()
	old := fmt.Sprintf(`{"version":1,"holder":{"name":"east","uid":"uid-east","epoch":3,"acquired_at_ns":%d,"lease_expires_at_ns":%d},`+
		`"clusters":{"uid-east":{"name":"east","highest_epoch":3,"last_epoch":3,"last_declared_at_ns":%d}}}`, acquired, expires, acquired)
	grant := fmt.Sprintf(`{"version":1,"name":"east","uid":"uid-east","epoch":3,"granted_at_ns":%d}`, acquired)
	if _, err := client.Put(ctx, s.grantKey("default"), grant); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Put(ctx, s.stateKey("default"), old); err != nil {
		t.Fatal(err)
	}

	snap, err := s.Get(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]statemachine.Lease{"": {Epoch: 3, ExpiresAt: statemachine.UnixNano(expires)}}
	if h := snap.State.Holder; h == nil || !reflect.DeepEqual(h.Instances, want) || h.Token == 0 {
		t.Fatalf("holder read from the old record: %+v, want instance \"\" with the old lease %+v", h, want)
	}

	// West takes over: it waits for the old lease, not less. This replica
	// never saw the lease before, so it counts a whole TTL from now, not
	// the 10s the writer's wall clock left it.
	r, err := s.Declare(ctx, "default", decl("west", 4), Actor{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Answer.Outcome != statemachine.Acquiring || r.Answer.RetryAfter != 15*time.Second {
		t.Fatalf("west declares 4: %s, retry after %s; want acquiring for the 15s this replica counts from first seeing the old lease", r.Answer.Outcome, r.Answer.RetryAfter)
	}
	// East's client, naming no instance, releases the old lease: west is
	// granted.
	res, _, err := s.Release(ctx, "default", rel("east", 3), Actor{})
	if err != nil || res.Outcome != statemachine.Released || !res.State.Holder.Released {
		t.Fatalf("east releases: %+v, %v; want the holder released", res, err)
	}
	if r, err := s.Declare(ctx, "default", decl("west", 4), Actor{}); err != nil || r.Answer.Outcome != statemachine.Granted {
		t.Fatalf("west declares 4 after the release: %+v, %v; want granted", r.Answer, err)
	}

	// What is stored now names the instances.
	got, err := client.Get(ctx, s.stateKey("default"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got.Kvs[0].Value), `"instances":{"":{"epoch":4,`) {
		t.Errorf("stored record %s does not name west's instance", got.Kvs[0].Value)
	}
}

// TestWatchersShareOneEtcdWatch has several watchers of one domain, and
// one of another, follow renewals and a takeover: the watchers of a domain
// share one etcd watch, and each still hears every change of its own
// domain, once, and only those. The watches end with their last watcher.
func TestWatchersShareOneEtcdWatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reg := prometheus.NewRegistry()
	s := newStore(t, embeddedEtcd(t), reg)
	for _, domain := range []string{"default", "other"} {
		if _, err := s.Declare(ctx, domain, decl("east", 1), Actor{}); err != nil {
			t.Fatal(err)
		}
	}
	type heard struct {
		domain string
		ev     Event
	}
	events := make(chan heard, 100)
	watchCtx, stop := context.WithCancel(ctx)
	defer stop()
	domains := []string{"default", "default", "default", "other"}
	for _, domain := range domains {
		go func() {
			_ = s.Watch(watchCtx, domain, func(ev Event) error {
				events <- heard{domain, ev}
				return nil
			})
		}()
	}
	next := func(what string) heard { return receive(ctx, t, events, what) }
	for range domains {
		next("a snapshot")
	}
	waitForGauge(ctx, t, s.metrics.etcdWatches, 2)
	for range 3 {
		if _, err := s.Declare(ctx, "default", decl("east", 1), Actor{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.Release(ctx, "default", rel("east", 1), Actor{}); err != nil {
		t.Fatal(err)
	}
	r, err := s.Declare(ctx, "default", decl("west", 2), Actor{})
	if err != nil {
		t.Fatal(err)
	}
	want := [][]statemachine.EventType{{statemachine.HolderReleased}, {statemachine.HolderChanged}}
	got := map[int]int{}
	for range 3 * len(want) {
		h := next("an event of the takeover")
		if h.domain != "default" {
			t.Fatalf("a watcher of %s heard %v", h.domain, h.ev.Types)
		}
		i := got[int(h.ev.Snapshot.Revision)]
		got[int(h.ev.Snapshot.Revision)]++
		if i >= 3 {
			t.Fatalf("revision %d heard more than once by a watcher", h.ev.Snapshot.Revision)
		}
		if equalTypes(h.ev.Types, want[1]) {
			if holder := h.ev.Snapshot.State.Holder; holder.Name != "west" || holder.Token != r.State.Holder.Token {
				t.Errorf("takeover heard with holder %s token %d, want west token %d", holder.Name, holder.Token, r.State.Holder.Token)
			}
		} else if !equalTypes(h.ev.Types, want[0]) {
			t.Errorf("heard %v, want %v or %v", h.ev.Types, want[0], want[1])
		}
	}
	select {
	case h := <-events:
		t.Errorf("heard %v in %s after the takeover, want nothing more", h.ev.Types, h.domain)
	case <-time.After(200 * time.Millisecond):
	}
	stop()
	waitForGauge(ctx, t, s.metrics.etcdWatches, 0)
}

// receive returns the next value on ch; what says what it is, should it
// never come.
func receive[T any](ctx context.Context, t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-ctx.Done():
		t.Fatalf("%s never came", what)
		var zero T
		return zero
	}
}

// waitForGauge waits until g is want.
func waitForGauge(ctx context.Context, t *testing.T, g prometheus.Gauge, want float64) {
	t.Helper()
	waitUntil(ctx, t, fmt.Sprintf("the gauge is %v", want), func() bool { return testutil.ToFloat64(g) == want })
}

// waitUntil waits until cond holds; what says what it waits for, should
// ctx end first.
func waitUntil(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting until %s", what)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestSlowWatcherCatchesUp has one watcher take its changes at once and
// another stop taking them while a standby raises its epoch step by step,
// each step a change of the pending takeover: the fast one hears every
// step in order; the slow one does not hold the fast one up, and once it
// takes changes again it hears what it missed as one event, with the last
// step's fence.
func TestSlowWatcherCatchesUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := newStore(t, embeddedEtcd(t), nil)
	if _, err := s.Declare(ctx, "default", decl("east", 1), Actor{}); err != nil {
		t.Fatal(err)
	}
	const steps = subscriptionBuffer + 16
	watchCtx, stop := context.WithCancel(ctx)
	defer stop()
	fast, slow := make(chan Event, 2*steps), make(chan Event, 2*steps)
	resume := make(chan struct{})
	go func() {
		_ = s.Watch(watchCtx, "default", func(ev Event) error { fast <- ev; return nil })
	}()
	go func() {
		_ = s.Watch(watchCtx, "default", func(ev Event) error {
			slow <- ev
			if len(ev.Types) > 0 {
				<-resume // only the first change waits
			}
			return nil
		})
	}()
	<-fast
	<-slow
	waitForGauge(ctx, t, s.metrics.etcdWatches, 1)
	for epoch := uint64(2); epoch < 2+steps; epoch++ {
		if _, err := s.Declare(ctx, "default", decl("west", epoch), Actor{}); err != nil {
			t.Fatal(err)
		}
	}
	const last = 2 + steps - 1
	for epoch := uint64(2); epoch <= last; epoch++ {
		ev := receive(ctx, t, fast, "the fast watcher's next event")
		if p := ev.Snapshot.State.Pending; p == nil || p.Epoch != epoch || !equalTypes(ev.Types, []statemachine.EventType{statemachine.PendingChanged}) {
			t.Fatalf("the fast watcher heard %v with pending %+v, want the pending takeover at epoch %d", ev.Types, p, epoch)
		}
	}
	close(resume)
	heard, rev := 0, int64(0)
	for {
		ev := receive(ctx, t, slow, "the slow watcher's next event")
		heard++
		if ev.Snapshot.Revision <= rev {
			t.Fatalf("the slow watcher heard revision %d after %d", ev.Snapshot.Revision, rev)
		}
		rev = ev.Snapshot.Revision
		if ev.Snapshot.State.Pending.Epoch == last {
			break
		}
	}
	if heard >= steps {
		t.Errorf("the slow watcher heard all %d steps: it was never cut off", heard)
	}
}

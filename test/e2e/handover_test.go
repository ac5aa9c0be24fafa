package e2e

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/types/known/timestamppb"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/hold"
	"github.com/fencegate/fencegate/internal/tcpproxy"
	"github.com/fencegate/fencegate/test/stack"
)

const (
	// handoverNamespace holds the CronJobs of the handover tests, in the
	// default domain.
	handoverNamespace = metav1.NamespaceDefault
	// handoverLabel marks them, so that the watches see only them.
	handoverLabel = "e2e.fencegate.dev/handover"
	// handoverJobs is how many CronJobs each cluster runs in
	// TestHandoverOrder: the number the overlap was first measured with.
	handoverJobs = 300
	// handoverLease is the authority's lease in TestHandoverOrder: the
	// cut-off handover waits for it to end, so it is short, yet long
	// enough for the agents' heartbeat (5s) and margin (2s).
	handoverLease = 10 * time.Second
	// handoverSettle bounds each wait for both clusters to stand still:
	// every Fence enforced and every CronJob held or released.
	handoverSettle = time.Minute
)

// startHandoverStack starts two clusters, east holding the fence and west
// fenced, whose fencegate holds CronJobs, each process reaching the
// authority through a proxy that can cut it off, with the authority's
// lease lease (its default when zero); and a watch of the handover
// CronJobs on each cluster, by name.
func startHandoverStack(tb testing.TB, ctx context.Context, lease time.Duration) (*stack.Stack, map[string]*suspendWatch) {
	tb.Helper()
	s := stack.StartForTest(tb, ctx, stack.Options{
		Clusters:         []stack.ClusterSpec{{Name: "east", Epoch: 1}, {Name: "west", Epoch: 1}},
		MTLS:             true,
		LeaseTTL:         lease,
		HoldKinds:        []string{"cronjobs.batch"},
		AuthorityProxies: true,
		Say:              tb.Logf,
	})
	watches := map[string]*suspendWatch{}
	for _, c := range s.Clusters {
		w, err := watchSuspend(ctx, c)
		if err != nil {
			tb.Fatal(err)
		}
		watches[c.Name] = w
	}
	return s, watches
}

// handoverJob is the i-th CronJob of the handover tests: running, on a
// schedule that would start a Job every minute. No kubelet or
// kube-controller-manager runs it: the tests look at spec.suspend, which
// is what a CronJob controller obeys.
func handoverJob(i int) *batchv1.CronJob {
	return &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("handover-%04d", i), Namespace: handoverNamespace, Labels: map[string]string{handoverLabel: "true"}},
		Spec: batchv1.CronJobSpec{
			Schedule: "*/1 * * * *",
			Suspend:  ptr.To(false),
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "job", Image: "job"}},
			}}}},
		},
	}
}

// unlimited is a cluster's admin config without client-side rate limit:
// the test makes hundreds of objects and watches them, and client-go's
// default (5 requests a second) would time the limiter, not the cluster.
func unlimited(c *stack.Cluster) *rest.Config {
	cfg := rest.CopyConfig(c.ControlPlane.Config)
	cfg.QPS = -1
	return cfg
}

// createHandoverJobs makes the CronJobs from..to-1 on every cluster, a few
// at a time, each created running (on the fenced cluster, fencegate then
// holds it).
func createHandoverJobs(tb testing.TB, ctx context.Context, s *stack.Stack, from, to int) {
	tb.Helper()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for _, c := range s.Clusters {
		cs, err := kubernetes.NewForConfig(unlimited(c))
		if err != nil {
			tb.Fatal(err)
		}
		for i := from; i < to; i++ {
			g.Go(func() error {
				_, err := cs.BatchV1().CronJobs(handoverNamespace).Create(gctx, handoverJob(i), metav1.CreateOptions{})
				if err != nil && !apierrors.IsAlreadyExists(err) {
					return fmt.Errorf("%s: create CronJob %d: %w", c.Label, i, err)
				}
				return nil
			})
		}
	}
	if err := g.Wait(); err != nil {
		tb.Fatal(err)
	}
}

// cronJobState is what the handover tests see of a CronJob: whether it is
// suspended, and whether fencegate's hold record is on it.
type cronJobState struct {
	suspended, recorded bool
}

func (s cronJobState) held() bool     { return s.suspended && s.recorded }
func (s cronJobState) released() bool { return !s.suspended && !s.recorded }

// suspendChange is one CronJob's spec.suspend changing, at the time the
// watch received it.
type suspendChange struct {
	name      string
	suspended bool
	at        time.Time
}

// suspendWatch follows the handover CronJobs of one cluster and records
// every change of spec.suspend with the time it was received. Both
// clusters' watches run in this process, on one clock, so the times of the
// two clusters compare; and a watch is how a CronJob controller itself
// learns that its CronJob was suspended or resumed, so the time a watch
// receives a change is when an actuator would obey it. (The managedFields
// of fencegate's hold manager carry a time too, but to the second only.)
type suspendWatch struct {
	label string

	mu      sync.Mutex
	state   map[string]cronJobState
	changes []suspendChange
	err     error
}

// watchSuspend lists the handover CronJobs of c and follows them from that
// list on.
func watchSuspend(ctx context.Context, c *stack.Cluster) (*suspendWatch, error) {
	cs, err := kubernetes.NewForConfig(unlimited(c))
	if err != nil {
		return nil, fmt.Errorf("%s: client: %w", c.Label, err)
	}
	jobs := cs.BatchV1().CronJobs(handoverNamespace)
	list, err := jobs.List(ctx, metav1.ListOptions{LabelSelector: handoverLabel})
	if err != nil {
		return nil, fmt.Errorf("%s: list CronJobs: %w", c.Label, err)
	}
	w := &suspendWatch{label: c.Label, state: map[string]cronJobState{}}
	now := time.Now()
	for i := range list.Items {
		w.see(&list.Items[i], now)
	}
	go w.follow(ctx, jobs, list.ResourceVersion)
	return w, nil
}

// cronJobWatcher is the part of a CronJob client that suspendWatch uses.
type cronJobWatcher interface {
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// follow watches from resource version rv until ctx ends, opening the
// watch again from where it was whenever the API server closes it.
func (w *suspendWatch) follow(ctx context.Context, jobs cronJobWatcher, rv string) {
	for ctx.Err() == nil {
		wi, err := jobs.Watch(ctx, metav1.ListOptions{LabelSelector: handoverLabel, ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			if ctx.Err() == nil {
				w.fail(fmt.Errorf("watch CronJobs from version %s: %w", rv, err))
			}
			return
		}
		for ev := range wi.ResultChan() {
			at := time.Now()
			switch ev.Type {
			case watch.Added, watch.Modified, watch.Deleted:
				cj, ok := ev.Object.(*batchv1.CronJob)
				if !ok {
					continue
				}
				rv = cj.ResourceVersion
				if ev.Type == watch.Deleted {
					w.forget(cj.Name)
				} else {
					w.see(cj, at)
				}
			case watch.Bookmark:
				if m, err := meta.Accessor(ev.Object); err == nil {
					rv = m.GetResourceVersion()
				}
			case watch.Error:
				// An expired version cannot be resumed: the record would
				// have a hole, so the watch fails instead.
				w.fail(fmt.Errorf("watch CronJobs: %w", apierrors.FromObject(ev.Object)))
				wi.Stop()
				return
			}
		}
		wi.Stop()
	}
}

func (w *suspendWatch) see(cj *batchv1.CronJob, at time.Time) {
	_, recorded := cj.Annotations[hold.RecordAnnotation]
	st := cronJobState{suspended: ptr.Deref(cj.Spec.Suspend, false), recorded: recorded}
	w.mu.Lock()
	defer w.mu.Unlock()
	if old, known := w.state[cj.Name]; known && old.suspended != st.suspended {
		w.changes = append(w.changes, suspendChange{name: cj.Name, suspended: st.suspended, at: at})
	}
	w.state[cj.Name] = st
}

func (w *suspendWatch) forget(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.state, name)
}

func (w *suspendWatch) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.err = cmp.Or(w.err, err)
}

// count is how many CronJobs the watch knows, how many of them ok, and
// whether it failed.
func (w *suspendWatch) count(ok func(cronJobState) bool) (all, matching int, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, st := range w.state {
		if ok(st) {
			matching++
		}
	}
	return len(w.state), matching, w.err
}

// since is every change received at or after t, and the names of the
// CronJobs the watch knows.
func (w *suspendWatch) since(t time.Time) ([]suspendChange, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	i, _ := slices.BinarySearchFunc(w.changes, t, func(c suspendChange, t time.Time) int { return c.at.Compare(t) })
	return slices.Clone(w.changes[i:]), slices.Sorted(maps.Keys(w.state))
}

// waitJobs waits until the watch knows n CronJobs and every one of them is
// ok, and fails tb if they are not within handoverSettle.
func waitJobs(tb testing.TB, ctx context.Context, w *suspendWatch, n int, what string, ok func(cronJobState) bool) {
	tb.Helper()
	deadline := time.Now().Add(handoverSettle)
	for {
		all, matching, err := w.count(ok)
		switch {
		case err != nil:
			tb.Fatalf("%s: %v", w.label, err)
		case all == n && matching == n:
			return
		case time.Now().After(deadline) || ctx.Err() != nil:
			tb.Fatalf("%s: %d of %d CronJobs %s after %s (%d known)", w.label, matching, n, what, handoverSettle, all)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitFenceTB polls a cluster's Fence of the default domain until its
// Holding and Enforced conditions are want, in its current generation.
func waitFenceTB(tb testing.TB, ctx context.Context, c *stack.Cluster, want string) {
	tb.Helper()
	deadline := time.Now().Add(handoverSettle)
	var f fencegatev1alpha1.Fence
	for {
		err := c.ControlPlane.Client.Get(ctx, client.ObjectKey{Name: "default"}, &f)
		if err == nil && conditions(&f) == want && f.Status.ObservedGeneration == f.Generation {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			tb.Fatalf("%s: the Fence never became %q: %v\nlast status: %s", c.Label, want, err, statusYAML(&f))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// settle waits until holder holds the fence and runs its n CronJobs and
// standby is fenced with its n CronJobs held: a handover can start.
func settle(tb testing.TB, ctx context.Context, s *stack.Stack, watches map[string]*suspendWatch, holder, standby string, n int) {
	tb.Helper()
	waitFenceTB(tb, ctx, s.Cluster(holder), holdingEnforced)
	waitFenceTB(tb, ctx, s.Cluster(standby), fencedEnforced)
	waitJobs(tb, ctx, watches[holder], n, "running, their holds released", cronJobState.released)
	waitJobs(tb, ctx, watches[standby], n, "held", cronJobState.held)
}

// handover is one measured handover of the fence from one cluster to the
// other, planned or after the holder was cut off from the authority.
type handover struct {
	from, to string
	cutOff   bool
	// jobs is how many CronJobs each cluster runs.
	jobs int
	// begin is where the record starts: the cut, else the failover's
	// start. Cut is when the holder was cut off from the authority,
	// leaseEnded when the authority said its lease had ended.
	begin, cut, leaseEnded time.Time
	// failoverStart and failoverEnd bound `fencegate failover --wait`;
	// failoverOut is its timeline.
	failoverStart, failoverEnd time.Time
	failoverOut                string
	// history is the authority's record of the domain since begin, by its
	// clock (the same machine's).
	history []*fencev1.FenceHistoryEvent
	// held is when each of the old holder's CronJobs was first seen
	// suspended; ranAgain names those seen running again after that.
	held     map[string]time.Time
	ranAgain []string
	// released is when each of the new holder's CronJobs was first seen
	// running.
	released map[string]time.Time
	// oldJobs and newJobs are the CronJobs each cluster had at the end.
	oldJobs, newJobs []string
}

// handOver moves the fence from holder from to to: planned, by `fencegate
// failover --to to --from from --wait`; or cut off, by cutting from's
// fencegate off from the authority, waiting until the authority says its
// lease ended, running `fencegate failover --to to --wait` (from's side
// cannot confirm, so it is not waited for) and healing the cut once that
// is done. It returns once both clusters stand still again, from fenced
// with every CronJob held and to holding with every CronJob running.
func handOver(tb testing.TB, ctx context.Context, s *stack.Stack, watches map[string]*suspendWatch, from, to string, jobs int, cutOff bool) *handover {
	tb.Helper()
	h := &handover{from: from, to: to, cutOff: cutOff, jobs: jobs}
	old := s.Cluster(from)
	args := []string{"--to", to, "--wait", "--timeout", "2m"}
	if cutOff {
		h.begin = time.Now()
		h.cut = h.begin
		for _, r := range old.Replicas {
			r.AuthorityProxy.Cut(tcpproxy.Drop)
		}
		h.leaseEnded = waitLeaseEnd(tb, ctx, s, from)
	} else {
		args = append(args, "--from", from, "--quiesce-timeout", "2m")
	}
	h.failoverStart = time.Now()
	if !cutOff {
		h.begin = h.failoverStart
	}
	out, errOut, exit, err := s.Failover(ctx, args...)
	h.failoverEnd = time.Now()
	h.failoverOut = out
	if err != nil || exit != 0 {
		tb.Fatalf("failover to %s: exit %d, %v\n%s%s", to, exit, err, out, errOut)
	}
	waitJobs(tb, ctx, watches[to], jobs, "running, their holds released", cronJobState.released)
	waitJobs(tb, ctx, watches[from], jobs, "held", cronJobState.held)
	if cutOff {
		for _, r := range old.Replicas {
			r.AuthorityProxy.Restore()
		}
	}
	// Once healed, the old holder learns it is fenced; it must not run
	// its CronJobs again on the way.
	settle(tb, ctx, s, watches, to, from, jobs)

	resp, err := s.Fence.GetFenceHistory(ctx, &fencev1.GetFenceHistoryRequest{Domain: "default", Since: timestamppb.New(h.begin)})
	if err != nil {
		tb.Fatalf("fence history: %v", err)
	}
	h.history = resp.GetEvents()

	var changes []suspendChange
	changes, h.oldJobs = watches[from].since(h.begin)
	h.held = map[string]time.Time{}
	for _, c := range changes {
		_, held := h.held[c.name]
		switch {
		case c.suspended && !held:
			h.held[c.name] = c.at
		case !c.suspended && held:
			h.ranAgain = append(h.ranAgain, c.name)
		}
	}
	changes, h.newJobs = watches[to].since(h.begin)
	h.released = map[string]time.Time{}
	for _, c := range changes {
		if _, ok := h.released[c.name]; !c.suspended && !ok {
			h.released[c.name] = c.at
		}
	}
	return h
}

// waitLeaseEnd waits until the authority says that holder's lease has
// ended, and returns when it ended.
func waitLeaseEnd(tb testing.TB, ctx context.Context, s *stack.Stack, holder string) time.Time {
	tb.Helper()
	// Three of the default lease: longer than any lease a stack here
	// grants.
	const within = 45 * time.Second
	deadline := time.Now().Add(within)
	for {
		callCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := s.Fence.GetFence(callCtx, &fencev1.GetFenceRequest{Domain: "default"})
		cancel()
		if err == nil {
			h := resp.GetFence().GetHolder()
			if h.GetClusterName() != holder {
				tb.Fatalf("the authority says %q holds the fence, want %s while its lease runs", h.GetClusterName(), holder)
			}
			if end := h.GetLeaseExpireTime().AsTime(); time.Now().After(end) {
				return end
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			tb.Fatalf("%s's lease did not end within %s of the cut: %v", holder, within, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// grant is the authority's grant of the fence to h.to, nil if its history
// has none.
func (h *handover) grant() *fencev1.FenceHistoryEvent {
	for _, e := range h.history {
		if e.GetType() == fencev1.FenceHistoryEventType_FENCE_HISTORY_EVENT_TYPE_GRANTED && e.GetClusterName() == h.to {
			return e
		}
	}
	return nil
}

// extreme is the earliest (first) or the latest CronJob of times.
func extreme(times map[string]time.Time, first bool) (string, time.Time) {
	var name string
	var at time.Time
	for n, t := range times {
		if name == "" || (first && t.Before(at)) || (!first && t.After(at)) || (t.Equal(at) && n < name) {
			name, at = n, t
		}
	}
	return name, at
}

// overlap is how long both clusters' CronJobs ran at once: from the new
// holder's first release to the old holder's last hold. It is negative
// when there was a gap, and ok is false when either side had nothing to
// hold or release.
func (h *handover) overlap() (d time.Duration, ok bool) {
	if len(h.held) == 0 || len(h.released) == 0 {
		return 0, false
	}
	_, lastHold := extreme(h.held, false)
	_, firstRelease := extreme(h.released, true)
	return lastHold.Sub(firstRelease), true
}

// liveAtFirstRelease is how many of the old holder's CronJobs were not yet
// held when the new holder released its first.
func (h *handover) liveAtFirstRelease() int {
	if len(h.released) == 0 {
		return 0
	}
	_, first := extreme(h.released, true)
	n := len(h.oldJobs) - len(h.held)
	for _, t := range h.held {
		if !t.Before(first) {
			n++
		}
	}
	return n
}

// violations say where the handover let both clusters act: a CronJob of
// the old holder held only after the new holder released one, one that ran
// again after it was held, one never held or never released.
func (h *handover) violations() []string {
	var out []string
	if d, ok := h.overlap(); ok && d >= 0 {
		lastName, _ := extreme(h.held, false)
		firstName, _ := extreme(h.released, true)
		out = append(out, fmt.Sprintf("%s held its last CronJob (%s) %s after %s released its first (%s): %d of %s's %d CronJobs were still running",
			h.from, lastName, d.Round(time.Millisecond), h.to, firstName, h.liveAtFirstRelease(), h.from, len(h.oldJobs)))
	}
	if len(h.ranAgain) > 0 {
		out = append(out, fmt.Sprintf("%s ran %d CronJobs again after they were held, e.g. %s", h.from, len(h.ranAgain), h.ranAgain[0]))
	}
	if missing := missingFrom(h.oldJobs, h.held); len(missing) > 0 {
		out = append(out, fmt.Sprintf("%s never held %d of its CronJobs during the handover, e.g. %s", h.from, len(missing), missing[0]))
	}
	if missing := missingFrom(h.newJobs, h.released); len(missing) > 0 {
		out = append(out, fmt.Sprintf("%s never released %d of its CronJobs during the handover, e.g. %s", h.to, len(missing), missing[0]))
	}
	return out
}

func missingFrom(names []string, seen map[string]time.Time) []string {
	var out []string
	for _, n := range names {
		if _, ok := seen[n]; !ok {
			out = append(out, n)
		}
	}
	return out
}

// kind names the handover.
func (h *handover) kind() string {
	if h.cutOff {
		return "cut-off"
	}
	return "planned"
}

// timeline says what happened when, from the start of the record: the
// cut, the authority's history, the failover command, the first and last
// hold and release; then the overlap or the gap.
func (h *handover) timeline() string {
	type entry struct {
		at   time.Time
		what string
	}
	var es []entry
	add := func(at time.Time, format string, args ...any) {
		es = append(es, entry{at, fmt.Sprintf(format, args...)})
	}
	if h.cutOff {
		add(h.cut, "%s's fencegate cut off from the authority", h.from)
		add(h.leaseEnded, "%s's lease ended (the authority's record)", h.from)
	}
	add(h.failoverStart, "fencegate failover --to %s started", h.to)
	add(h.failoverEnd, "fencegate failover returned")
	for _, e := range h.history {
		what := strings.ToLower(strings.TrimPrefix(e.GetType().String(), "FENCE_HISTORY_EVENT_TYPE_"))
		detail := ""
		if e.GetGrant() != "" {
			detail = fmt.Sprintf(" (%s, token %d)", e.GetGrant(), e.GetToken())
		}
		if e.GetInstance() != "" {
			detail += " instance " + e.GetInstance()
		}
		add(e.GetTime().AsTime(), "authority: %s %s at epoch %d%s", what, e.GetClusterName(), e.GetEpoch(), detail)
	}
	if len(h.held) > 0 {
		name, at := extreme(h.held, true)
		add(at, "%s held its first CronJob (%s)", h.from, name)
		name, at = extreme(h.held, false)
		add(at, "%s held its last CronJob (%s), %d of %d", h.from, name, len(h.held), len(h.oldJobs))
	}
	if len(h.released) > 0 {
		name, at := extreme(h.released, true)
		add(at, "%s released its first CronJob (%s)", h.to, name)
		name, at = extreme(h.released, false)
		add(at, "%s released its last CronJob (%s), %d of %d", h.to, name, len(h.released), len(h.newJobs))
	}
	slices.SortStableFunc(es, func(a, b entry) int { return a.at.Compare(b.at) })
	var b strings.Builder
	fmt.Fprintf(&b, "%s handover %s → %s, %d CronJobs on each cluster:\n", h.kind(), h.from, h.to, h.jobs)
	for _, e := range es {
		fmt.Fprintf(&b, "  %+8.3fs  %s\n", e.at.Sub(h.begin).Seconds(), e.what)
	}
	switch d, ok := h.overlap(); {
	case !ok:
		b.WriteString("  no CronJob to hold or release: no overlap to measure\n")
	case d >= 0:
		fmt.Fprintf(&b, "  OVERLAP %d ms: both clusters' CronJobs ran at once; %d of %s's %d were still running when %s released its first\n",
			d.Milliseconds(), h.liveAtFirstRelease(), h.from, len(h.oldJobs), h.to)
	default:
		fmt.Fprintf(&b, "  gap %d ms: %s held its last CronJob before %s released its first\n", (-d).Milliseconds(), h.from, h.to)
	}
	return b.String()
}

// summary is the handover on one line: when, from the failover's start,
// the fence was granted, the old holder held its last CronJob and the new
// holder released its first and last, and the overlap or the gap.
func (h *handover) summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s → %s:", h.kind(), h.from, h.to)
	since := func(t time.Time) string { return fmt.Sprintf("%+.3fs", t.Sub(h.failoverStart).Seconds()) }
	if h.cutOff {
		fmt.Fprintf(&b, " cut %s, lease ended %s,", since(h.cut), since(h.leaseEnded))
	}
	if g := h.grant(); g != nil {
		fmt.Fprintf(&b, " granted %s (%s),", since(g.GetTime().AsTime()), g.GetGrant())
	}
	if len(h.held) > 0 {
		_, at := extreme(h.held, false)
		fmt.Fprintf(&b, " last hold %s,", since(at))
	}
	if len(h.released) > 0 {
		_, first := extreme(h.released, true)
		_, last := extreme(h.released, false)
		fmt.Fprintf(&b, " first release %s, all released %s,", since(first), since(last))
	}
	fmt.Fprintf(&b, " failover returned %s", since(h.failoverEnd))
	switch d, ok := h.overlap(); {
	case ok && d >= 0:
		fmt.Fprintf(&b, "; OVERLAP %d ms", d.Milliseconds())
	case ok:
		fmt.Fprintf(&b, "; gap %d ms", (-d).Milliseconds())
	}
	return b.String()
}

// TestHandoverOrder: on two real control planes, each running 300
// CronJobs, both API servers are watched while the fence moves, and the
// old holder's last hold must come before the new holder's first release,
// every time: in a planned failover (`fencegate failover --from --wait`),
// there and back, and in a failover after the holder was cut off from the
// authority (its fencegate partitioned, the failover run once its lease
// ended, the cut healed once the new holder took over). Every CronJob of
// the old holder ends suspended, every one of the new holder running, and
// the old holder runs none again, also once the cut is healed.
func TestHandoverOrder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, watches := startHandoverStack(t, ctx, handoverLease)
	created := time.Now()
	createHandoverJobs(t, ctx, s, 0, handoverJobs)
	settle(t, ctx, s, watches, "east", "west", handoverJobs)
	t.Logf("%d CronJobs on each cluster, east's running and west's held, in %s", handoverJobs, time.Since(created).Round(time.Millisecond))

	check := func(t *testing.T, h *handover) {
		t.Helper()
		t.Logf("%s\nthe failover's own timeline:\n%s", h.timeline(), h.failoverOut)
		for _, v := range h.violations() {
			t.Error(v)
		}
	}
	t.Run("planned", func(t *testing.T) {
		check(t, handOver(t, ctx, s, watches, "east", "west", handoverJobs, false))
		check(t, handOver(t, ctx, s, watches, "west", "east", handoverJobs, false))
	})
	t.Run("cut-off", func(t *testing.T) {
		// The planned subtest hands the fence back to east; if it stopped
		// half way, this one starts from wherever the fence is.
		from, to := "east", "west"
		if !holds(ctx, s.Cluster("east")) {
			from, to = to, from
		}
		settle(t, ctx, s, watches, from, to, handoverJobs)
		check(t, handOver(t, ctx, s, watches, from, to, handoverJobs, true))
	})
}

// holds says whether c's Fence says it holds the fence.
func holds(ctx context.Context, c *stack.Cluster) bool {
	var f fencegatev1alpha1.Fence
	if err := c.ControlPlane.Client.Get(ctx, client.ObjectKey{Name: "default"}, &f); err != nil {
		return false
	}
	return conditions(&f) == holdingEnforced
}

// TestHandoverVerdict: what a recorded handover is judged to be, on
// records made up for the purpose (TestHandoverOrder records real ones).
func TestHandoverVerdict(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	jobs := []string{"a", "b", "c"}
	tests := map[string]struct {
		held, released map[string]time.Time
		ranAgain       []string
		overlap        time.Duration
		measured       bool
		live           int
		violations     []string
	}{
		"every hold before the first release": {
			held:     map[string]time.Time{"a": at(10), "b": at(20), "c": at(30)},
			released: map[string]time.Time{"a": at(50), "b": at(40), "c": at(60)},
			overlap:  -10 * time.Millisecond, measured: true,
		},
		"the last hold after the first release": {
			held:     map[string]time.Time{"a": at(10), "b": at(45), "c": at(70)},
			released: map[string]time.Time{"a": at(50), "b": at(40), "c": at(60)},
			overlap:  30 * time.Millisecond, measured: true, live: 2,
			violations: []string{"east held its last CronJob (c) 30ms after west released its first (b): 2 of east's 3 CronJobs were still running"},
		},
		"a hold at the very time of the release is no order": {
			held:     map[string]time.Time{"a": at(10), "b": at(20), "c": at(40)},
			released: map[string]time.Time{"a": at(40), "b": at(41), "c": at(42)},
			overlap:  0, measured: true, live: 1,
			violations: []string{"east held its last CronJob (c) 0s after west released its first (a): 1 of east's 3 CronJobs were still running"},
		},
		"a CronJob never held, one run again": {
			held:     map[string]time.Time{"a": at(10), "b": at(20)},
			released: map[string]time.Time{"a": at(50), "b": at(40), "c": at(60)},
			ranAgain: []string{"b"},
			overlap:  -20 * time.Millisecond, measured: true, live: 1,
			violations: []string{
				"east ran 1 CronJobs again after they were held, e.g. b",
				"east never held 1 of its CronJobs during the handover, e.g. c",
			},
		},
		"a CronJob never released": {
			held:     map[string]time.Time{"a": at(10), "b": at(20), "c": at(30)},
			released: map[string]time.Time{"b": at(40)},
			overlap:  -10 * time.Millisecond, measured: true,
			violations: []string{"west never released 2 of its CronJobs during the handover, e.g. a"},
		},
		"nothing to hold": {},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			h := &handover{from: "east", to: "west", begin: t0, held: tt.held, released: tt.released, ranAgain: tt.ranAgain}
			if tt.held != nil || tt.released != nil {
				h.oldJobs, h.newJobs = jobs, jobs
			}
			d, ok := h.overlap()
			if d != tt.overlap || ok != tt.measured {
				t.Errorf("overlap() = %s, %v; want %s, %v", d, ok, tt.overlap, tt.measured)
			}
			if live := h.liveAtFirstRelease(); live != tt.live {
				t.Errorf("liveAtFirstRelease() = %d, want %d", live, tt.live)
			}
			if got := h.violations(); !slices.Equal(got, tt.violations) {
				t.Errorf("violations() =\n  %q\nwant\n  %q", got, tt.violations)
			}
			timeline := h.timeline()
			want := "gap"
			switch {
			case !tt.measured:
				want = "no overlap to measure"
			case tt.overlap >= 0:
				want = "OVERLAP"
			}
			if !strings.Contains(timeline, want) {
				t.Errorf("the timeline does not say %q:\n%s", want, timeline)
			}
			if summary := h.summary(); tt.measured && !strings.Contains(summary, want) {
				t.Errorf("the summary does not say %q: %s", want, summary)
			}
		})
	}
}

package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/test/cluster"
	"github.com/fencegate/fencegate/test/stack"
)

// The sizes of BenchmarkWriteLatency: the writes each set-up gets in one
// iteration (half creates, half updates), at writeRate in all.
const (
	writesPerSetup      = 1000
	writesPerSetupShort = 30
)

// writeRate is the writes a second offered to the API server, in all four
// set-ups together (each gets a quarter): far more than people write, far
// below what one API server takes on two cores, so that the latencies are
// those of the admission path and not of a queue. fencegate's controller
// adds a status write for each (it marks every Component it sees change).
const writeRate = 50

// writePool is how many Components of each set-up the updates take turns
// on, made before the timed writes.
const writePool = 10

// writeSetup is one way the API server admits Component writes, each in a
// namespace of its own.
type writeSetup struct {
	// name labels the set-up's metrics (fencegate-p99-ms, …).
	name      string
	namespace string
	// stamped says whether an admitted write carries fencegate's stamp.
	stamped bool
}

var writeSetups = []writeSetup{
	{name: "fencegate", namespace: "latency-fencegate", stamped: true},
	{name: "webhooks", namespace: bareWebhooksNamespace},
	{name: "floor", namespace: "latency-floor"},
	{name: "vap", namespace: vapNamespace},
}

// bareWebhooksNamespace is the namespace of the bare webhooks' set-up.
const bareWebhooksNamespace = "latency-webhooks"

// vapNamespace is the namespace of the policy's set-up.
const vapNamespace = "latency-vap"

// vapProbeNamespace is where a second binding of the policy reads a Fence
// that says this cluster does not hold it, to show that the policy refuses
// then.
const vapProbeNamespace = "latency-vap-fenced"

// notHeldFence is that Fence's name: it names no domain fencegate serves,
// so fencegate leaves it alone.
const notHeldFence = "latency-not-held"

// Names of the ValidatingAdmissionPolicy and its bindings.
const (
	vapName        = "fencegate-fence-held"
	vapBinding     = "fencegate-fence-held"
	vapProbe       = "fencegate-fence-held-probe"
	vapDeniedWords = "does not hold the fence"
)

// BenchmarkWriteLatency measures what a Component create or update costs the
// person who makes it, end to end through a real kube-apiserver (and its
// etcd) served by a real `fencegate run` that holds the fence of an
// authority with mTLS, in four set-ups measured in the same run:
//
//   - fencegate: fencegate's validating and mutating webhooks admit the
//     write and stamp it with the epoch and the fencing token;
//   - webhooks: two bare webhooks, a mutating and a validating one, that
//     decide nothing (startBareWebhooks): what any pair of webhook calls
//     costs through the API server, fencegate's floor as a webhook;
//   - floor: no webhook and no policy applies;
//   - vap: a ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1)
//     whose parameter is the Fence, bound with paramRef default: its CEL
//     admits a write only while the Fence's status.state is active. This
//     is the in-process anchor a user might pick instead of a webhook.
//
// Each set-up has a namespace of its own: fencegate's webhooks skip the
// other three (a namespaceSelector on their Component entries, like the
// one the chart gives the fenced kinds), the bare webhooks and the policy
// are bound to their own. So every write pays the same matching (the API
// server checks each one against every webhook configuration and both
// bindings), and only the calls and the checks differ.
// The writes go out open loop at writeRate in all, in a shuffled order
// within each round of four, so that every set-up meets the same API
// server at the same moments; half are creates of new Components and half
// JSON merge patches of the spec of one of writePool existing ones (an
// update at admission). Each write's admitted object is checked: stamped
// with the Fence's token by fencegate's set-up, unstamped by the others.
// A second binding of the policy, whose parameter is a Fence that says
// this cluster is fenced, shows that the policy refuses then.
//
// What the policy cannot do, and fencegate does: CEL has no clock, so the
// policy admits as long as the Fence says active, also when fencegate's
// pods have died and nobody renews the lease: it cannot stop at the
// lease's end, when the authority may grant the fence to another cluster.
// Nor can it stamp the fencing token on what it admits (a validating
// policy changes nothing), so an actuator cannot tell a write decided
// under an older holder.
//
// It reports each set-up's p50 and p99 in milliseconds, the differences
// from the floor's and the ratios to them (goal: fencegate's p99 at most
// 1 ms over the floor's), and fencegate's differences from the bare
// webhooks' (what fencegate's decisions add to the two calls).
// Run it with -benchtime 1x (make bench does): 1,000 writes per set-up,
// a minute. -short writes 30 per set-up; TestWriteLatency runs that size.
func BenchmarkWriteLatency(b *testing.B) {
	n := writesPerSetup
	if testing.Short() {
		n = writesPerSetupShort
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	w := startWriteLatency(b, ctx)
	took := map[string][]time.Duration{}
	var last writeLatencies
	for round := 0; b.Loop(); round++ {
		last = w.measure(b, ctx, round, n)
		for _, s := range writeSetups {
			took[s.name] = append(took[s.name], last.all(s.name)...)
		}
	}
	floor := sorted(took["floor"])
	for _, s := range writeSetups {
		d := sorted(took[s.name])
		p50, p99 := percentile(d, 0.50), percentile(d, 0.99)
		b.ReportMetric(ms(p50), s.name+"-p50-ms")
		b.ReportMetric(ms(p99), s.name+"-p99-ms")
		if s.name != "floor" {
			floor50, floor99 := percentile(floor, 0.50), percentile(floor, 0.99)
			b.ReportMetric(ms(p50-floor50), s.name+"-p50-over-floor-ms")
			b.ReportMetric(ms(p99-floor99), s.name+"-p99-over-floor-ms")
			b.ReportMetric(float64(p50)/float64(floor50), s.name+"-p50/floor")
			b.ReportMetric(float64(p99)/float64(floor99), s.name+"-p99/floor")
		}
	}
	fencegate, bare := sorted(took["fencegate"]), sorted(took["webhooks"])
	b.ReportMetric(ms(percentile(fencegate, 0.50)-percentile(bare, 0.50)), "fencegate-p50-over-webhooks-ms")
	b.ReportMetric(ms(percentile(fencegate, 0.99)-percentile(bare, 0.99)), "fencegate-p99-over-webhooks-ms")
	b.ReportMetric(0, "ns/op")
	b.Logf("%d writes per set-up at %d writes/s in all (goal: fencegate's p99 ≤ 1 ms over the floor's); the last round's creates and updates:\n%s%s",
		len(took["floor"]), writeRate, latencyTable(took, last.create, last.update), last.webhooks)
}

// TestWriteLatency runs BenchmarkWriteLatency's -short size, so that its
// set-ups and the checks of what each one admits stay tested.
func TestWriteLatency(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	w := startWriteLatency(t, ctx)
	r := w.measure(t, ctx, 0, writesPerSetupShort)
	took := map[string][]time.Duration{}
	for _, s := range writeSetups {
		took[s.name] = r.all(s.name)
		if len(took[s.name]) != writesPerSetupShort {
			t.Errorf("%s: %d writes timed, want %d", s.name, len(took[s.name]), writesPerSetupShort)
		}
	}
	for _, name := range []string{
		"mutate.components.fencegate.dev", "validate.components.fencegate.dev", fencegatePrefix + "mutate", fencegatePrefix + "validate",
		"mutate." + bareWebhooksName, "validate." + bareWebhooksName,
	} {
		if r.webhooks[name].calls == 0 {
			t.Errorf("no calls to %s were timed; %s", name, r.webhooks)
		}
	}
	t.Logf("\n%s%s", latencyTable(took, r.create, r.update), r.webhooks)
}

// writeLatency is a cluster set up for the four ways of admission.
type writeLatency struct {
	cluster *stack.Cluster
	// client writes as a cluster admin, without a client-side rate limit.
	client client.Client
	// token is the fencing token fencegate stamps.
	token string
	// bareAnswered counts the reviews the bare webhooks answered.
	bareAnswered *atomic.Int64
}

// startWriteLatency starts an authority and one cluster served by one
// `fencegate run`, waits until it holds the fence and enforces it, and sets
// up the four namespaces' admission: fencegate's webhooks for one, the
// bare webhooks for another, none for the floor, the policy for the last.
func startWriteLatency(tb testing.TB, ctx context.Context) *writeLatency {
	tb.Helper()
	s := stack.StartForTest(tb, ctx, stack.Options{
		Clusters: []stack.ClusterSpec{{Name: "east", Epoch: 1}},
		MTLS:     true,
	})
	east := s.Cluster("east")
	cfg := rest.CopyConfig(east.ControlPlane.Config)
	cfg.QPS = -1 // no client-side limit: the writes go out on schedule
	cl, err := client.New(cfg, client.Options{Scheme: east.ControlPlane.Scheme})
	if err != nil {
		tb.Fatal(err)
	}
	w := &writeLatency{cluster: east, client: cl}

	w.token = fmt.Sprint(waitHeldDefault(tb, ctx, cl).Status.Token)

	for _, ns := range append(setupNamespaces(), vapProbeNamespace) {
		if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			tb.Fatalf("create namespace %s: %v", ns, err)
		}
	}
	if err := w.scopeWebhooks(ctx); err != nil {
		tb.Fatal(err)
	}
	if w.bareAnswered, err = startBareWebhooks(tb, ctx, cl, bareWebhooksNamespace); err != nil {
		tb.Fatal(err)
	}
	if err := w.installPolicy(ctx); err != nil {
		tb.Fatal(err)
	}
	if err := w.waitSetUp(ctx); err != nil {
		tb.Fatal(err)
	}
	return w
}

// setupNamespaces are the set-ups' namespaces.
func setupNamespaces() []string {
	var out []string
	for _, s := range writeSetups {
		out = append(out, s.namespace)
	}
	return out
}

// scopeWebhooks gives fencegate's Component webhooks a namespaceSelector
// that skips the namespaces of the floor and of the policy.
func (w *writeLatency) scopeWebhooks(ctx context.Context) error {
	var skip []string
	for _, s := range writeSetups {
		if !s.stamped {
			skip = append(skip, s.namespace)
		}
	}
	skip = append(skip, vapProbeNamespace)
	selector := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: skip,
	}}}
	var validating admissionregistrationv1.ValidatingWebhookConfiguration
	if err := w.client.Get(ctx, client.ObjectKey{Name: cluster.ValidatingWebhookName}, &validating); err != nil {
		return err
	}
	for i := range validating.Webhooks {
		validating.Webhooks[i].NamespaceSelector = selector
	}
	if err := w.client.Update(ctx, &validating); err != nil {
		return fmt.Errorf("scope fencegate's validating webhook: %w", err)
	}
	var mutating admissionregistrationv1.MutatingWebhookConfiguration
	if err := w.client.Get(ctx, client.ObjectKey{Name: cluster.MutatingWebhookName}, &mutating); err != nil {
		return err
	}
	for i := range mutating.Webhooks {
		mutating.Webhooks[i].NamespaceSelector = selector
	}
	if err := w.client.Update(ctx, &mutating); err != nil {
		return fmt.Errorf("scope fencegate's mutating webhook: %w", err)
	}
	return nil
}

// installPolicy makes the ValidatingAdmissionPolicy, its binding to the
// Fence of domain default for the policy's namespace, and its binding to a
// Fence that says this cluster is fenced for the probe namespace.
func (w *writeLatency) installPolicy(ctx context.Context) error {
	// A Fence whose status says what a fenced cluster's says.
	notHeld := &fencegatev1alpha1.Fence{ObjectMeta: metav1.ObjectMeta{Name: notHeldFence}}
	if err := w.client.Create(ctx, notHeld); err != nil {
		return fmt.Errorf("create Fence %s: %w", notHeldFence, err)
	}
	notHeld.Status = fencegatev1alpha1.ClusterFenceStatus{
		State:       "fenced",
		FenceReason: "CLUSTER_FENCED",
		Holder:      &fencegatev1alpha1.FenceCluster{Name: "west", Epoch: 2},
	}
	if err := w.client.Status().Update(ctx, notHeld); err != nil {
		return fmt.Errorf("write the status of Fence %s: %w", notHeldFence, err)
	}
	if err := w.client.Create(ctx, fenceHeldPolicy()); err != nil {
		return fmt.Errorf("create ValidatingAdmissionPolicy %s: %w", vapName, err)
	}
	for _, b := range []struct{ name, fence, namespace string }{
		{vapBinding, "default", vapNamespace},
		{vapProbe, notHeldFence, vapProbeNamespace},
	} {
		binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: b.name},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName: vapName,
				ParamRef: &admissionregistrationv1.ParamRef{
					Name:                    b.fence,
					ParameterNotFoundAction: ptr.To(admissionregistrationv1.DenyAction),
				},
				MatchResources: &admissionregistrationv1.MatchResources{
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: b.namespace}},
				},
				ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			},
		}
		if err := w.client.Create(ctx, binding); err != nil {
			return fmt.Errorf("create ValidatingAdmissionPolicyBinding %s: %w", b.name, err)
		}
	}
	return nil
}

// fenceHeldPolicy is the policy a user might write instead of fencegate's
// webhooks: Component writes (and status writes but fencegate's own) are
// refused unless the Fence bound as the parameter says this cluster holds
// the fence.
func fenceHeldPolicy() *admissionregistrationv1.ValidatingAdmissionPolicy {
	return &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: vapName},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			ParamKind: &admissionregistrationv1.ParamKind{
				APIVersion: fencegatev1alpha1.GroupVersion.String(),
				Kind:       "Fence",
			},
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{
							admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete,
						},
						Rule: admissionregistrationv1.Rule{
							APIGroups:   []string{fencegatev1alpha1.GroupVersion.Group},
							APIVersions: []string{"*"},
							Resources:   []string{"components", "components/status"},
							Scope:       ptr.To(admissionregistrationv1.NamespacedScope),
						},
					},
				}},
			},
			// fencegate's controller marks Components fenced: its status
			// writes are always admitted, as data.fencegate.config's
			// controller_users are.
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name:       "not-fencegate",
				Expression: fmt.Sprintf("request.userInfo.username != %q", stack.ControllerUser),
			}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "has(params.status) && has(params.status.state) && params.status.state == 'active'",
				MessageExpression: "'fencegate: this cluster " + vapDeniedWords + " of domain ' + params.metadata.name + " +
					"' (state ' + (has(params.status) && has(params.status.state) ? params.status.state : 'unknown') + ')'",
				Reason: ptr.To(metav1.StatusReasonForbidden),
			}},
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
		},
	}
}

// waitSetUp waits until the API server admits as each set-up says: a
// server-side dry run of a create in each namespace is stamped only in
// fencegate's, the bare webhooks answer the one in theirs, and the probe
// namespace's is refused by the policy.
func (w *writeLatency) waitSetUp(ctx context.Context) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		last = nil
		for _, s := range writeSetups {
			c := latencyComponent(s.namespace, "probe")
			answered := w.bareAnswered.Load()
			if err := w.client.Create(ctx, c, client.DryRunAll); err != nil {
				last = fmt.Errorf("%s: a dry-run create: %w", s.name, err)
				return false, nil
			}
			if err := w.checkStamp(s, c); err != nil {
				last = err
				return false, nil
			}
			if s.namespace == bareWebhooksNamespace && w.bareAnswered.Load() == answered {
				last = errors.New("the API server has not called the bare webhooks yet")
				return false, nil
			}
		}
		switch err := w.client.Create(ctx, latencyComponent(vapProbeNamespace, "probe"), client.DryRunAll); {
		case err == nil:
			last = errors.New("the policy bound to a Fence that says fenced admitted a dry-run create")
			return false, nil
		case !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), vapDeniedWords):
			last = fmt.Errorf("the policy bound to a Fence that says fenced: a dry-run create: %w, want refused (%q)", err, vapDeniedWords)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("the set-ups never admitted as they should: %w: %w", err, last)
	}
	return nil
}

// checkStamp checks that an object s admitted carries the stamp of
// fencegate's mutating webhook if s has it, and none otherwise.
func (w *writeLatency) checkStamp(s writeSetup, c *fencegatev1alpha1.Component) error {
	token, ok := c.Annotations["fencegate.dev/token"]
	switch {
	case s.stamped && token != w.token:
		return fmt.Errorf("%s: %s admitted with token %q, want %q", s.name, c.Name, token, w.token)
	case !s.stamped && ok:
		return fmt.Errorf("%s: %s admitted stamped (token %q), want no stamp", s.name, c.Name, token)
	}
	return nil
}

func latencyComponent(namespace, name string) *fencegatev1alpha1.Component {
	return &fencegatev1alpha1.Component{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: fencegatev1alpha1.ComponentSpec{
			Enabled: true,
			Chart:   fencegatev1alpha1.ChartRef{Repository: "https://charts.example.com", Name: "app", Version: "1.0.0"},
		},
	}
}

// writeLatencies are one round's write latencies per set-up, creates and
// updates apart.
type writeLatencies struct {
	create, update map[string][]time.Duration
	// webhooks is the API server's own account of the round's calls to
	// fencegate's webhooks and the bare ones, and fencegate's.
	webhooks webhookTimes
}

func (l writeLatencies) all(setup string) []time.Duration {
	return slices.Concat(l.create[setup], l.update[setup])
}

// measure makes n writes in each set-up, as BenchmarkWriteLatency says, and
// returns their latencies; round names the round's Components.
func (w *writeLatency) measure(tb testing.TB, ctx context.Context, round, n int) writeLatencies {
	tb.Helper()
	for _, s := range writeSetups {
		for i := range writePool {
			c := latencyComponent(s.namespace, fmt.Sprintf("r%d-pool-%02d", round, i))
			if err := w.client.Create(ctx, c); err != nil {
				tb.Fatalf("%s: create %s: %v", s.name, c.Name, err)
			}
		}
	}
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	before, err := w.webhookTimes(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	l := writeLatencies{create: map[string][]time.Duration{}, update: map[string][]time.Duration{}}
	// write makes the j-th write of set-up s: a create when j is even, a
	// merge patch of the spec of a pool Component when odd.
	write := func(s writeSetup, j int) {
		defer wg.Done()
		var (
			c     *fencegatev1alpha1.Component
			err   error
			start time.Time
		)
		creates := j%2 == 0
		if creates {
			c = latencyComponent(s.namespace, fmt.Sprintf("r%d-%04d", round, j/2))
			start = time.Now()
			err = w.client.Create(ctx, c)
		} else {
			c = latencyComponent(s.namespace, fmt.Sprintf("r%d-pool-%02d", round, (j/2)%writePool))
			patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"values":{"write":%d}}}`, j))
			start = time.Now()
			err = w.client.Patch(ctx, c, patch)
		}
		d := time.Since(start)
		if err == nil {
			err = w.checkStamp(s, c)
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: write %d (%s): %w", s.name, j, c.Name, err))
			return
		}
		if creates {
			l.create[s.name] = append(l.create[s.name], d)
		} else {
			l.update[s.name] = append(l.update[s.name], d)
		}
	}
	// Open loop: each write goes out on its schedule, whatever the ones
	// before it take. Each round of four takes the set-ups in an order of
	// its own.
	rng := rand.New(rand.NewPCG(uint64(round), 1))
	interval := time.Second / writeRate
	start := time.Now()
	for j := range n {
		for i, k := range rng.Perm(len(writeSetups)) {
			time.Sleep(time.Until(start.Add(time.Duration(j*len(writeSetups)+i) * interval)))
			wg.Add(1)
			go write(writeSetups[k], j)
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		tb.Fatal(err)
	}
	after, err := w.webhookTimes(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	l.webhooks = after.since(before)
	return l
}

// webhookTime is how many calls to a webhook were timed and the seconds
// they took.
type webhookTime struct {
	calls   uint64
	seconds float64
}

// webhookTimes are the calls to fencegate's webhooks and to the bare ones
// as the API server times them (from sending the request to reading the
// answer), by the webhook's name, and the calls to fencegate's as
// fencegate times them (from reading the request to writing the answer),
// by "fencegate /" and its endpoint. (The API server
// times a policy's checks only when one fails or refuses, so the policy's
// cost shows only in the writes' latencies.)
type webhookTimes map[string]webhookTime

// fencegatePrefix marks fencegate's own times in webhookTimes.
const fencegatePrefix = "fencegate /"

// webhookTimes reads the API server's and fencegate's histograms of the
// time each spends on each webhook call.
func (w *writeLatency) webhookTimes(ctx context.Context) (webhookTimes, error) {
	cfg := w.cluster.ControlPlane.Config
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	out := webhookTimes{}
	if err := out.add(ctx, hc, strings.TrimSuffix(cfg.Host, "/")+"/metrics", "apiserver_admission_webhook_admission_duration_seconds", "name", ""); err != nil {
		return nil, err
	}
	if err := out.add(ctx, http.DefaultClient, "http://"+w.cluster.Metrics+"/metrics", "fencegate_admission_duration_seconds", "endpoint", fencegatePrefix); err != nil {
		return nil, err
	}
	return out, nil
}

// add adds the histograms of family that url serves, by the value of
// label after prefix.
func (times webhookTimes) add(ctx context.Context, hc *http.Client, url, family, label, prefix string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("scrape %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return fmt.Errorf("parse the metrics of %s: %w", url, err)
	}
	for _, m := range families[family].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label {
				t := times[prefix+l.GetValue()]
				t.calls += m.GetHistogram().GetSampleCount()
				t.seconds += m.GetHistogram().GetSampleSum()
				times[prefix+l.GetValue()] = t
			}
		}
	}
	return nil
}

// since is what was added to times after before.
func (times webhookTimes) since(before webhookTimes) webhookTimes {
	out := webhookTimes{}
	for name, t := range times {
		out[name] = webhookTime{calls: t.calls - before[name].calls, seconds: t.seconds - before[name].seconds}
	}
	return out
}

// String is the mean time of a call to each webhook, the API server's and
// fencegate's.
func (times webhookTimes) String() string {
	var apiserver, fencegate []string
	for _, name := range slices.Sorted(maps.Keys(times)) {
		t := times[name]
		if t.calls == 0 {
			continue
		}
		mean := fmt.Sprintf("%s %.3f ms (%d calls)", strings.TrimPrefix(name, fencegatePrefix), t.seconds*1000/float64(t.calls), t.calls)
		if strings.HasPrefix(name, fencegatePrefix) {
			fencegate = append(fencegate, "/"+mean)
		} else {
			apiserver = append(apiserver, mean)
		}
	}
	return "mean time per webhook call, as the API server times it: " + strings.Join(apiserver, ", ") +
		"; as fencegate times it: " + strings.Join(fencegate, ", ")
}

// latencyTable lays out p50, p99 and the slowest write of each set-up, all
// writes and the given creates and updates apart.
func latencyTable(all, creates, updates map[string][]time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-10s %24s %24s %24s\n", "set-up", "all p50/p99/max", "creates p50/p99/max", "updates p50/p99/max")
	row := func(d []time.Duration) string {
		d = sorted(d)
		if len(d) == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f/%.2f/%.2f ms", ms(percentile(d, 0.50)), ms(percentile(d, 0.99)), ms(d[len(d)-1]))
	}
	for _, s := range writeSetups {
		fmt.Fprintf(&b, "%-10s %24s %24s %24s\n", s.name, row(all[s.name]), row(creates[s.name]), row(updates[s.name]))
	}
	return b.String()
}

// sorted returns a sorted copy of d.
func sorted(d []time.Duration) []time.Duration {
	d = slices.Clone(d)
	slices.Sort(d)
	return d
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// waitHeldDefault waits until the Fence of domain default says its cluster
// holds the fence and enforces it, and returns it.
func waitHeldDefault(tb testing.TB, ctx context.Context, cl client.Client) *fencegatev1alpha1.Fence {
	tb.Helper()
	var f fencegatev1alpha1.Fence
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := cl.Get(ctx, client.ObjectKey{Name: "default"}, &f); err != nil {
			return false, nil //nolint:nilerr // not created yet; keep polling
		}
		return conditions(&f) == holdingEnforced, nil
	})
	if err != nil {
		tb.Fatalf("east never held the fence and enforced it: %v\nlast status: %s", err, statusYAML(&f))
	}
	return &f
}

package gate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/fencegate/fencegate/internal/notify"
)

// WebhookSuffix ends the name of each of fencegate's webhooks
// (validate.fencegate.dev, mutate.kinds.fencegate.dev, ...): the Gate
// looks for the rules of these alone.
const WebhookSuffix = ".fencegate.dev"

// newUnfencedKinds is fencegate_gate_unfenced_kinds. The Gates of one
// process that register on one registry share the first one's.
func newUnfencedKinds() *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fencegate_gate_unfenced_kinds",
		Help: "1 for each kind the gate's client gates that no fencegate webhook fences (a validating and a mutating webhook named *" + WebhookSuffix +
			" whose rules cover its creates and updates): its writes' fencegate.dev/write-token is then stored unchecked, and nothing refuses a stale write of it; 0 once one does.",
	}, []string{"kind"})
}

// webhookCheck tells, at start and every Options.WebhookCheck, which gated
// kinds no fencegate webhook fences: an error logged once per kind each
// time it becomes so, and fencegate_gate_unfenced_kinds. It only reads; a
// failure to read (RBAC) is logged, never fatal.
type webhookCheck struct {
	reader client.Reader
	mapper meta.RESTMapper
	gauge  *prometheus.GaugeVec
	log    logr.Logger
	// again asks for a check at once: a kind gated after start.
	again chan struct{}
	mu    sync.Mutex
	kinds map[schema.GroupVersionKind]bool
	// unfenced is each kind's last finding: true when no webhook fenced
	// it, false when one did; absent before the first.
	unfenced map[schema.GroupVersionKind]bool
	// readErr is the last failure to read the configurations, logged
	// once until a read succeeds.
	readErr string
}

func newWebhookCheck(mgr manager.Manager, reg prometheus.Registerer, log logr.Logger) (*webhookCheck, error) {
	// A client of its own: the operator's scheme need not know the
	// webhook configurations.
	scheme := runtime.NewScheme()
	if err := admissionregistrationv1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("gate: the webhook configurations' scheme: %w", err)
	}
	reader, err := client.New(mgr.GetConfig(), client.Options{Scheme: scheme, HTTPClient: mgr.GetHTTPClient()})
	if err != nil {
		return nil, fmt.Errorf("gate: a client of the webhook configurations: %w", err)
	}
	gauge := newUnfencedKinds()
	if err := reg.Register(gauge); err != nil {
		var already prometheus.AlreadyRegisteredError
		if !errors.As(err, &already) {
			return nil, fmt.Errorf("gate: register fencegate_gate_unfenced_kinds: %w", err)
		}
		// Another Gate of this process registered it, or one like it.
		existing, ok := already.ExistingCollector.(*prometheus.GaugeVec)
		if !ok {
			return nil, fmt.Errorf("gate: register fencegate_gate_unfenced_kinds: %w", err)
		}
		gauge = existing
	}
	return &webhookCheck{
		reader: reader, mapper: mgr.GetRESTMapper(), gauge: gauge, log: log.WithName("webhooks"),
		again: notify.New(), kinds: map[schema.GroupVersionKind]bool{}, unfenced: map[schema.GroupVersionKind]bool{},
	}, nil
}

// add gates kinds: a check is made for them soon.
func (w *webhookCheck) add(kinds ...schema.GroupVersionKind) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, k := range kinds {
		w.kinds[k] = true
	}
	notify.Signal(w.again)
}

// run checks at once, every interval (never again when it is negative) and
// whenever a kind is gated, until ctx ends.
func (w *webhookCheck) run(ctx context.Context, c clock.Clock, interval time.Duration) {
	for {
		w.check(ctx)
		var tick <-chan time.Time
		var t clock.Timer
		if interval > 0 {
			t = c.NewTimer(interval)
			tick = t.C()
		}
		select {
		case <-ctx.Done():
		case <-tick:
		case <-w.again:
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// check reads the webhook configurations and reports the gated kinds that
// none of fencegate's webhooks fences.
func (w *webhookCheck) check(ctx context.Context) {
	w.mu.Lock()
	kinds := make([]schema.GroupVersionKind, 0, len(w.kinds))
	for k := range w.kinds {
		kinds = append(kinds, k)
	}
	w.mu.Unlock()
	if len(kinds) == 0 {
		return
	}
	var validating admissionregistrationv1.ValidatingWebhookConfigurationList
	var mutating admissionregistrationv1.MutatingWebhookConfigurationList
	err := w.reader.List(ctx, &validating)
	if err == nil {
		err = w.reader.List(ctx, &mutating)
	}
	if err != nil {
		w.readFailed(err)
		return
	}
	w.mu.Lock()
	w.readErr = ""
	w.mu.Unlock()
	var validates, mutates []fencegateWebhook
	for _, c := range validating.Items {
		for _, wh := range c.Webhooks {
			validates = append(validates, fencegateWebhook{config: c.Name, name: wh.Name, rules: wh.Rules, matchPolicy: wh.MatchPolicy})
		}
	}
	for _, c := range mutating.Items {
		for _, wh := range c.Webhooks {
			mutates = append(mutates, fencegateWebhook{config: c.Name, name: wh.Name, rules: wh.Rules, matchPolicy: wh.MatchPolicy})
		}
	}
	slices.SortFunc(kinds, func(a, b schema.GroupVersionKind) int { return strings.Compare(a.String(), b.String()) })
	for _, gvk := range kinds {
		why := ""
		mapping, err := w.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			why = fmt.Sprintf("its resource is not known to the API server (%v)", err)
		} else {
			why = unfencedBecause(mapping.Resource, validates, mutates)
		}
		w.report(gvk, why)
	}
}

// readFailed logs a failure to read the webhook configurations, once until
// a read succeeds; the findings stay as they were.
func (w *webhookCheck) readFailed(err error) {
	w.mu.Lock()
	repeated := w.readErr == err.Error()
	w.readErr = err.Error()
	w.mu.Unlock()
	if !repeated {
		w.log.Error(err, "cannot read the webhook configurations, so the gate cannot tell whether fencegate's webhooks fence the kinds it gates "+
			"(allow get and list of validatingwebhookconfigurations and mutatingwebhookconfigurations to be told)")
	}
}

// report records gvk's finding: why no webhook fences it, "" when one does.
func (w *webhookCheck) report(gvk schema.GroupVersionKind, why string) {
	kind := gvk.GroupKind().String()
	w.mu.Lock()
	was, known := w.unfenced[gvk]
	w.unfenced[gvk] = why != ""
	w.mu.Unlock()
	if why == "" {
		w.gauge.WithLabelValues(kind).Set(0)
		if known && was {
			w.log.Info("a fencegate webhook now fences a gated kind", "kind", kind)
		}
		return
	}
	w.gauge.WithLabelValues(kind).Set(1)
	if !known || !was {
		w.log.Error(errors.New("gated kind not fenced by a webhook"), "no fencegate webhook fences a kind the gate's client gates: "+
			"the write tokens its writes assert (fencegate.dev/write-token) are stored unchecked, so a write decided under an earlier hold is not refused, "+
			"and a stored token may be taken for an assertion later; add the kind to fencegate's admission.kinds",
			"kind", kind, "why", why)
	}
}

// fencegateWebhook is one webhook of a configuration, as the check reads it.
type fencegateWebhook struct {
	config, name string
	rules        []admissionregistrationv1.RuleWithOperations
	matchPolicy  *admissionregistrationv1.MatchPolicyType
}

// unfencedBecause says why neither a validating webhook of fencegate's
// (which checks the asserted token) nor a mutating one (which removes it)
// covers the creates and updates of resource; "" when both do.
func unfencedBecause(resource schema.GroupVersionResource, validates, mutates []fencegateWebhook) string {
	var missing []string
	if !anyCovers(validates, resource) {
		missing = append(missing, "no validating webhook named *"+WebhookSuffix+" checks its creates and updates")
	}
	if !anyCovers(mutates, resource) {
		missing = append(missing, "no mutating webhook named *"+WebhookSuffix+" sees its creates and updates")
	}
	return strings.Join(missing, "; ")
}

func anyCovers(webhooks []fencegateWebhook, resource schema.GroupVersionResource) bool {
	return slices.ContainsFunc(webhooks, func(wh fencegateWebhook) bool { return wh.covers(resource) })
}

// covers says whether wh is fencegate's and sends it the creates and
// updates of resource. Its selectors are not read: a namespace or object
// they leave out is not told.
func (wh fencegateWebhook) covers(resource schema.GroupVersionResource) bool {
	if !strings.HasSuffix(wh.name, WebhookSuffix) {
		return false
	}
	// An Equivalent match policy (the default) sends a request of any
	// version of the resource the rules name in another.
	equivalent := wh.matchPolicy == nil || *wh.matchPolicy == admissionregistrationv1.Equivalent
	for _, r := range wh.rules {
		if matches(r.APIGroups, resource.Group) && (equivalent || matches(r.APIVersions, resource.Version)) &&
			(matches(r.Resources, resource.Resource) || slices.Contains(r.Resources, "*/*")) &&
			operates(r.Operations, admissionregistrationv1.Create) && operates(r.Operations, admissionregistrationv1.Update) {
			return true
		}
	}
	return false
}

// matches says whether a rule's list names value or all ("*").
func matches(list []string, value string) bool {
	return slices.Contains(list, value) || slices.Contains(list, "*")
}

func operates(ops []admissionregistrationv1.OperationType, op admissionregistrationv1.OperationType) bool {
	return slices.Contains(ops, op) || slices.Contains(ops, admissionregistrationv1.OperationAll)
}

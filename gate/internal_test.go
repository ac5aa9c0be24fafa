package gate

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/domain"
	"github.com/fencegate/fencegate/internal/envflag"
)

// TestHoldEnd: the Gate's end of a published hold is never later than the
// replica's validity when either the clocks agree within the skew or the
// Lease reached the Gate within it, whichever one is off.
func TestHoldEnd(t *testing.T) {
	const skew = time.Second
	// now is the Gate's clock; the replica's clock reads now+offset.
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	tests := map[string]struct {
		// offset is the replica's clock less the Gate's; delay is how long
		// after the replica wrote the Lease the Gate's cache took it;
		// left is how long the hold had left when written.
		offset, delay, left time.Duration
		// want is the end, relative to the true end of the hold on the
		// Gate's clock.
		want time.Duration
	}{
		"clocks agree, the Lease comes at once":       {left: 9 * time.Second, want: -skew},
		"the Gate's clock an hour behind":             {offset: time.Hour, left: 9 * time.Second, want: -skew},
		"the Gate's clock an hour ahead":              {offset: -time.Hour, left: 9 * time.Second, want: -time.Hour - skew},
		"a watch that lagged 30s, clocks agree":       {delay: 30 * time.Second, left: 9 * time.Second, want: -skew},
		"behind by 500ms and a lag of 500ms":          {offset: 500 * time.Millisecond, delay: 500 * time.Millisecond, left: 9 * time.Second, want: -500 * time.Millisecond},
		"behind by a minute and a lag of 3s: 2s late": {offset: time.Minute, delay: 3 * time.Second, left: 9 * time.Second, want: 2 * time.Second},
		"a hold already ended when written":           {left: -time.Second, want: -skew},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			// The replica writes at written (the Gate's clock); its own
			// clock then reads written+offset.
			written := now
			renewed := written.Add(tc.offset)
			validUntil := renewed.Add(tc.left)
			trueEnd := written.Add(tc.left)
			got := holdEnd(validUntil, renewed, written.Add(tc.delay), skew)
			if d := got.Sub(trueEnd); d != tc.want {
				t.Errorf("holdEnd ends %v from the true end, want %v", d, tc.want)
			}
		})
	}
}

// TestObservationsDateTheFirstSight: a Lease version is dated when the
// cache first took it, a relist of it keeps that date, an unknown version
// has none, and a deleted Lease's dates go.
func TestObservationsDateTheFirstSight(t *testing.T) {
	c := clocktesting.NewFakeClock(time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC))
	o := newObservations(c)
	lease := func(rv string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "fencegate", Name: "a", ResourceVersion: rv}}
	}
	first := c.Now()
	if _, err := o.transform(lease("1")); err != nil {
		t.Fatal(err)
	}
	c.Step(time.Second)
	if _, err := o.transform(lease("1")); err != nil {
		t.Fatal(err)
	}
	if got := o.at(lease("1")); !got.Equal(first) {
		t.Errorf("version 1 dated %v, want its first sight %v", got, first)
	}
	if _, err := o.transform(lease("2")); err != nil {
		t.Fatal(err)
	}
	if got := o.at(lease("2")); !got.Equal(first.Add(time.Second)) {
		t.Errorf("version 2 dated %v, want %v", got, first.Add(time.Second))
	}
	if got := o.at(lease("3")); !got.IsZero() {
		t.Errorf("an unseen version dated %v, want none", got)
	}
	for i := range 2 * keptVersions {
		if _, err := o.transform(lease(strings.Repeat("x", i+3))); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(o.seen["fencegate/a"]); n != keptVersions {
		t.Errorf("%d versions kept, want %d", n, keptVersions)
	}
	o.forget(lease("9"))
	if len(o.seen) != 0 {
		t.Errorf("a deleted Lease's dates kept: %v", o.seen)
	}
}

// TestInferDefault: without Options.Domain, the default domain is the only
// Fence's name, and none with no Fence or several.
func TestInferDefault(t *testing.T) {
	tests := map[string]struct {
		configured string
		fences     []string
		want       string
	}{
		"one Fence":             {fences: []string{"payments"}, want: "payments"},
		"no Fence":              {want: ""},
		"several Fences":        {fences: []string{"default", "payments"}, want: ""},
		"configured wins":       {configured: "payments", fences: []string{"default"}, want: "payments"},
		"configured, no Fences": {configured: "payments", want: "payments"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := &Gate{opts: Options{Domain: tc.configured}, defaultDomain: tc.configured}
			g.inferDefault(tc.fences)
			if g.defaultDomain != tc.want {
				t.Errorf("default domain %q, want %q", g.defaultDomain, tc.want)
			}
		})
	}
}

// TestDomainEnvIsFencegateRuns: DomainEnv is the variable of fencegate
// run's --domain.
func TestDomainEnvIsFencegateRuns(t *testing.T) {
	if got := envflag.Name("domain"); got != DomainEnv {
		t.Errorf("fencegate run --domain reads %s, the Gate %s", got, DomainEnv)
	}
}

// TestTombstones: a deleted object's domain label is kept for the
// reconcile of its deletion, for a while.
func TestTombstones(t *testing.T) {
	c := clocktesting.NewFakeClock(time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC))
	ts := newTombstones(c)
	obj := func(name, label string) *coordinationv1.Lease {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}
		if label != "" {
			l.Labels = map[string]string{domain.Label: label}
		}
		return l
	}
	key := func(name string) types.NamespacedName { return types.NamespacedName{Namespace: "default", Name: name} }
	ts.deleted(obj("labelled", "payments"))
	ts.deleted(obj("plain", ""))
	if got := ts.label(key("labelled")); got != "payments" {
		t.Errorf("labelled: %q, want payments", got)
	}
	if got := ts.label(key("plain")); got != "" {
		t.Errorf("plain: %q, want none", got)
	}
	c.Step(tombstoneTTL + time.Minute)
	ts.deleted(obj("later", "search"))
	if got := ts.label(key("labelled")); got != "" {
		t.Errorf("labelled after the TTL: %q, want it dropped", got)
	}
}

// TestWebhookCovers: a kind is fenced when a validating and a mutating
// webhook of fencegate's both cover its creates and updates.
func TestWebhookCovers(t *testing.T) {
	cronjobs := schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "cronjobs"}
	rule := func(groups, versions, resources []string, ops ...admissionregistrationv1.OperationType) admissionregistrationv1.RuleWithOperations {
		return admissionregistrationv1.RuleWithOperations{Operations: ops, Rule: admissionregistrationv1.Rule{APIGroups: groups, APIVersions: versions, Resources: resources}}
	}
	all := []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete}
	kinds := rule([]string{"batch"}, []string{"*"}, []string{"cronjobs"}, all...)
	fg := func(name string, rules ...admissionregistrationv1.RuleWithOperations) []fencegateWebhook {
		return []fencegateWebhook{{name: name, rules: rules}}
	}
	exact := admissionregistrationv1.Exact
	tests := map[string]struct {
		validates, mutates []fencegateWebhook
		wantWhy            []string
	}{
		"both cover":                  {validates: fg("validate.kinds.fencegate.dev", kinds), mutates: fg("mutate.kinds.fencegate.dev", kinds)},
		"wildcards":                   {validates: fg("validate.fencegate.dev", rule([]string{"*"}, []string{"*"}, []string{"*"}, "*")), mutates: fg("mutate.fencegate.dev", rule([]string{"*"}, []string{"*"}, []string{"*/*"}, "*"))},
		"no webhooks":                 {wantWhy: []string{"no validating", "no mutating"}},
		"another's webhook":           {validates: fg("validate.example.com", kinds), mutates: fg("mutate.kinds.fencegate.dev", kinds), wantWhy: []string{"no validating"}},
		"another resource":            {validates: fg("validate.fencegate.dev", rule([]string{"batch"}, []string{"*"}, []string{"jobs"}, all...)), mutates: fg("mutate.kinds.fencegate.dev", kinds), wantWhy: []string{"no validating"}},
		"another group":               {validates: fg("validate.fencegate.dev", kinds), mutates: fg("mutate.fencegate.dev", rule([]string{"apps"}, []string{"*"}, []string{"cronjobs"}, all...)), wantWhy: []string{"no mutating"}},
		"the status subresource":      {validates: fg("validate.fencegate.dev", rule([]string{"batch"}, []string{"*"}, []string{"cronjobs/status"}, all...)), mutates: fg("mutate.fencegate.dev", kinds), wantWhy: []string{"no validating"}},
		"creates only":                {validates: fg("validate.fencegate.dev", rule([]string{"batch"}, []string{"*"}, []string{"cronjobs"}, admissionregistrationv1.Create)), mutates: fg("mutate.fencegate.dev", kinds), wantWhy: []string{"no validating"}},
		"another version, Equivalent": {validates: fg("validate.fencegate.dev", rule([]string{"batch"}, []string{"v1beta1"}, []string{"cronjobs"}, all...)), mutates: fg("mutate.fencegate.dev", kinds)},
		"another version, Exact": {
			validates: []fencegateWebhook{{name: "validate.fencegate.dev", matchPolicy: &exact, rules: []admissionregistrationv1.RuleWithOperations{rule([]string{"batch"}, []string{"v1beta1"}, []string{"cronjobs"}, all...)}}},
			mutates:   fg("mutate.fencegate.dev", kinds), wantWhy: []string{"no validating"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			why := unfencedBecause(cronjobs, tc.validates, tc.mutates)
			if len(tc.wantWhy) == 0 {
				if why != "" {
					t.Errorf("unfenced: %s; want fenced", why)
				}
				return
			}
			for _, w := range tc.wantWhy {
				if !strings.Contains(why, w) {
					t.Errorf("unfenced because %q, want it to say %q", why, w)
				}
			}
		})
	}
}

// forbidden is a reader that RBAC refuses.
type forbidden struct{ client.Reader }

func (forbidden) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return apierrors.NewForbidden(schema.GroupResource{Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations"}, "", errors.New("RBAC"))
}

// TestWebhookCheckSurvivesRBAC: a check that may not read the webhook
// configurations logs it once, reports no kind, and goes on.
func TestWebhookCheckSurvivesRBAC(t *testing.T) {
	var logged []string
	log := funcr.New(func(_, args string) { logged = append(logged, args) }, funcr.Options{})
	w := &webhookCheck{reader: forbidden{}, gauge: newUnfencedKinds(), log: log, again: make(chan struct{}, 1),
		kinds: map[schema.GroupVersionKind]bool{{Group: "batch", Version: "v1", Kind: "CronJob"}: true}, unfenced: map[schema.GroupVersionKind]bool{}}
	for range 3 {
		w.check(context.Background())
	}
	if len(logged) != 1 || !strings.Contains(logged[0], "cannot read the webhook configurations") {
		t.Errorf("logged %q, want the failure once", logged)
	}
	if len(w.unfenced) != 0 {
		t.Errorf("findings %v without reading the configurations, want none", w.unfenced)
	}
}

// plain has status.conditions but does not say so: the Gate does not
// look for them by reflection.
type plain struct {
	metav1.ObjectMeta
	metav1.TypeMeta
	Status struct{ Conditions []metav1.Condition }
}

func (p *plain) DeepCopyObject() runtime.Object { c := *p; return &c }

// conditioned is Conditioned.
type conditioned struct{ plain }

func (c *conditioned) GetConditions() []metav1.Condition { return c.Status.Conditions }

func (c *conditioned) DeepCopyObject() runtime.Object { d := *c; return &d }

func TestMarksConditions(t *testing.T) {
	for name, tc := range map[string]struct {
		obj  client.Object
		opts []ReconcilerOption
		want bool
	}{
		"Conditioned":                       {obj: &conditioned{}, want: true},
		"Conditioned, WithoutConditions":    {obj: &conditioned{}, opts: []ReconcilerOption{WithoutConditions()}, want: false},
		"conditions not offered":            {obj: &plain{}, want: false},
		"fencegate's Component":             {obj: &fencegatev1alpha1.Component{}, want: false},
		"a Component, WithoutConditions":    {obj: &fencegatev1alpha1.Component{}, opts: []ReconcilerOption{WithoutConditions()}, want: false},
		"a ConfigMap, no status conditions": {obj: &corev1.ConfigMap{}, want: false},
	} {
		t.Run(name, func(t *testing.T) {
			var cfg reconcilerConfig
			for _, o := range tc.opts {
				o(&cfg)
			}
			if got := marksConditions(tc.obj, cfg); got != tc.want {
				t.Errorf("marksConditions(%T) = %v, want %v", tc.obj, got, tc.want)
			}
		})
	}
}

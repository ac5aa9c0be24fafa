package domain_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/fencegate/fencegate/domain"
)

// labels are namespaces' domain labels; a namespace named "broken" cannot
// be read.
type labels map[string]string

func (l labels) DomainLabel(_ context.Context, namespace string) (string, error) {
	if namespace == "broken" {
		return "", errors.New("cache not synced")
	}
	return l[namespace], nil
}

func TestResolverOf(t *testing.T) {
	r := domain.Resolver{Default: "default", Namespaces: labels{"shop": "payments", "plain": ""}}
	tests := map[string]struct {
		resolver            domain.Resolver
		namespace, label    string
		want, wantErrSubstr string
	}{
		"the object's label wins":               {resolver: r, namespace: "shop", label: "search", want: "search"},
		"else its namespace's":                  {resolver: r, namespace: "shop", want: "payments"},
		"else the default":                      {resolver: r, namespace: "plain", want: "default"},
		"an unknown namespace has the default":  {resolver: r, namespace: "elsewhere", want: "default"},
		"a cluster-scoped object":               {resolver: r, want: "default"},
		"no namespace labels at all":            {resolver: domain.Resolver{Default: "default"}, namespace: "shop", want: "default"},
		"a namespace that cannot be read fails": {resolver: r, namespace: "broken", wantErrSubstr: "the fence domain of namespace broken: cache not synced"},
		"the object's label needs no namespace": {resolver: r, namespace: "broken", label: "search", want: "search"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := tc.resolver.Of(context.Background(), tc.namespace, tc.label)
			if tc.wantErrSubstr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErrSubstr) {
					t.Fatalf("Of = %q, %v; want an error with %q", got, err, tc.wantErrSubstr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("Of = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestServed(t *testing.T) {
	many := make([]string, domain.MaxServed)
	for i := range many {
		many[i] = fmt.Sprintf("d%d", i)
	}
	tests := map[string]struct {
		def    string
		others []string
		want   []string
		// errs are parts of the error; none: no error.
		errs []string
	}{
		"the default alone":               {def: "default", want: []string{"default"}},
		"the default first, no repeats":   {def: "default", others: []string{"payments", "default", "search", "payments"}, want: []string{"default", "payments", "search"}},
		"every bad name is named":         {def: "Default", others: []string{"ok", "no_underscores", ""}, errs: []string{"default domain", `"no_underscores"`, "domain"}},
		"exactly the bound":               {def: "d0", others: many[1:], want: many},
		"one more than the bound refused": {def: "extra", others: many, errs: []string{"101 domains: one fencegate serves at most 100"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := domain.Served(tc.def, tc.others)
			if len(tc.errs) == 0 {
				if err != nil || !slices.Equal(got, tc.want) {
					t.Errorf("Served = %v, %v; want %v", got, err, tc.want)
				}
				return
			}
			for _, part := range tc.errs {
				if err == nil || !strings.Contains(err.Error(), part) {
					t.Errorf("error %v lacks %q", err, part)
				}
			}
		})
	}
}

func TestNamespaceLabels(t *testing.T) {
	reader := fake.NewClientBuilder().WithObjects(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{domain.Label: "payments"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "plain", Labels: map[string]string{"team": "a"}}},
	).Build()
	n := domain.NewNamespaceLabels(nil, reader, nil)
	for ns, want := range map[string]string{"shop": "payments", "plain": "", "missing": ""} {
		got, err := n.DomainLabel(context.Background(), ns)
		if err != nil || got != want {
			t.Errorf("DomainLabel(%s) = %q, %v; want %q", ns, got, err, want)
		}
	}
	// A namespace the cache does not know yet is read live.
	live := domain.NewNamespaceLabels(nil, fake.NewClientBuilder().Build(), reader)
	if got, err := live.DomainLabel(context.Background(), "shop"); err != nil || got != "payments" {
		t.Errorf("DomainLabel(shop) missing from the cache = %q, %v; want payments, read live", got, err)
	}
	broken := domain.NewNamespaceLabels(nil, fake.NewClientBuilder().WithScheme(runtime.NewScheme()).Build(), nil)
	if _, err := broken.DomainLabel(context.Background(), "shop"); err == nil || !strings.Contains(err.Error(), "read namespace shop") {
		t.Errorf("DomainLabel without the Namespace type = %v; want an error naming the namespace", err)
	}
}

package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/domain"
	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/engine/enginetest"
	"github.com/fencegate/fencegate/fencestate"
)

// namespaceLabels are namespaces' domain labels.
type namespaceLabels map[string]string

func (l namespaceLabels) DomainLabel(_ context.Context, namespace string) (string, error) {
	if namespace == "unreadable" {
		return "", errors.New("the namespace cache is not synced")
	}
	return l[namespace], nil
}

// inDomain is a state of domain d.
func inDomain(s fencestate.State, d string) fencestate.State {
	s.Domain = d
	return s
}

// labelled is a Component in namespace, labelled with domain d ("" for no
// label).
func labelled(t *testing.T, name, namespace, d string) []byte {
	t.Helper()
	var obj map[string]any
	if err := json.Unmarshal(enginetest.Component(name, namespace, nil), &obj); err != nil {
		t.Fatal(err)
	}
	if d != "" {
		obj["metadata"].(map[string]any)["labels"] = map[string]any{domain.Label: d}
	}
	out, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDomains: each object is decided with its own domain's data.fence,
// found from its label, its namespace's, or the default; a domain not
// served is refused; a change that moves an object between domains needs
// both domains' consent.
func TestDomains(t *testing.T) {
	e := newEngine(t, engine.Options{
		Domains:    []string{"default", "payments", "search"},
		Namespaces: namespaceLabels{"shop": "payments"},
	})
	writeFence(t, e, inDomain(eastActive, "default"))
	if err := e.Ready(); !errors.Is(err, engine.ErrNotReady) || !strings.Contains(err.Error(), "payments, search") {
		t.Errorf("Ready with two domains unwritten = %v, want ErrNotReady naming them", err)
	}
	writeFence(t, e, inDomain(westFenced, "payments"))
	if err := e.WriteFence(context.Background(), inDomain(eastActive, "elsewhere")); err == nil || !strings.Contains(err.Error(), `domain "elsewhere" is not served here (served: default, payments, search)`) {
		t.Errorf("WriteFence of a domain not served = %v", err)
	}
	if got := e.Domains(); strings.Join(got, ",") != "default,payments,search" {
		t.Errorf("Domains = %v", got)
	}

	create := func(obj []byte) engine.ReviewRequest { return engine.ReviewRequest{Operation: "CREATE", Object: obj} }
	update := func(obj, old []byte) engine.ReviewRequest {
		return engine.ReviewRequest{Operation: "UPDATE", Object: obj, OldObject: old}
	}
	tests := map[string]struct {
		req engine.ReviewRequest
		// domain and from are the result's domains; allowed the decision,
		// reasons parts of its reasons; err a part of the error.
		domain, from string
		allowed      bool
		reasons      []string
		warnings     []string
		err          string
	}{
		"no label: the default domain, held here": {
			req: create(labelled(t, "web", "plain", "")), domain: "default", allowed: true,
		},
		"its label: payments, held by east": {
			req: create(labelled(t, "pay", "plain", "payments")), domain: "payments",
			reasons: []string{"east"},
		},
		"its namespace's label": {
			req: create(labelled(t, "pay", "shop", "")), domain: "payments",
		},
		"its own label wins over its namespace's": {
			req: create(labelled(t, "web", "shop", "default")), domain: "default", allowed: true,
		},
		"a domain without a state yet is not ready": {
			req: create(labelled(t, "find", "plain", "search")), domain: "search", err: "domain search: no fence state has been written yet",
		},
		"a domain not served is refused, saying which are": {
			req: create(labelled(t, "odd", "plain", "elsewhere")), domain: "elsewhere",
			reasons: []string{"does not serve the fence domain", "default, payments, search"},
		},
		"a namespace that cannot be read fails the request": {
			req: create(labelled(t, "web", "unreadable", "")), err: "the fence domain of namespace unreadable",
		},
		"moving out of a domain held elsewhere needs its consent": {
			req: update(labelled(t, "pay", "plain", ""), labelled(t, "pay", "plain", "payments")), domain: "default", from: "payments",
			reasons: []string{"moving the object out of fence domain payments: "},
		},
		"moving into a domain held elsewhere needs its consent": {
			req: update(labelled(t, "web", "plain", "payments"), labelled(t, "web", "plain", "")), domain: "payments", from: "default",
		},
		"naming the domain it is in already is no move": {
			req: update(labelled(t, "web", "plain", "default"), labelled(t, "web", "plain", "")), domain: "default", allowed: true,
		},
		"a DELETE is decided by the deleted object's domain": {
			req: engine.ReviewRequest{Operation: "DELETE", OldObject: labelled(t, "pay", "plain", "payments")}, domain: "payments", allowed: true,
			warnings: []string{"does not hold the ownership fence"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			res, err := e.Admit(context.Background(), enginetest.Review(t, tc.req))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Admit = %+v, %v; want an error with %q", res.Decision, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Domain != tc.domain || res.FromDomain != tc.from || res.Decision.Allowed != tc.allowed {
				t.Errorf("domain %q from %q allowed %t; want %q, %q, %t (reasons %v)", res.Domain, res.FromDomain, res.Decision.Allowed, tc.domain, tc.from, tc.allowed, res.Decision.Reasons)
			}
			if res.Fence.Domain != tc.domain && tc.domain != "elsewhere" {
				t.Errorf("the fence seen is domain %q's, want %q's", res.Fence.Domain, tc.domain)
			}
			if !tc.allowed && len(res.Decision.Patch) > 0 {
				t.Errorf("a refused change carries a patch: %+v", res.Decision.Patch)
			}
			for _, want := range []struct {
				what  string
				got   []string
				parts []string
			}{{"reasons", res.Decision.Reasons, tc.reasons}, {"warnings", res.Decision.Warnings, tc.warnings}} {
				got := strings.Join(want.got, "\n")
				for _, part := range want.parts {
					if !strings.Contains(got, part) {
						t.Errorf("%s %q lack %q", want.what, got, part)
					}
				}
			}
		})
	}

	for d, hold := range map[string]bool{"default": false, "payments": true, "search": false, "elsewhere": true} {
		got, err := e.Reconcile(context.Background(), d, map[string]any{})
		switch {
		case d == "search":
			if !errors.Is(err, engine.ErrNotReady) {
				t.Errorf("Reconcile in search = %v, want ErrNotReady", err)
			}
		case err != nil || got.Hold != hold:
			t.Errorf("Reconcile in %s = %+v, %v; want hold %t", d, got, err, hold)
		}
	}
}

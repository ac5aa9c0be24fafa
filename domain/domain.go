// Package domain says which fence domain an object belongs to, and checks
// the domains one fencegate serves. A Component's domain is its label
// fencegate.dev/domain, else its namespace's, else the default domain:
// one cluster holds the fence of some applications' domains while its peer
// holds the others' (active/active by application), and each fails over
// on its own.
package domain

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	"github.com/fencegate/fencegate/internal/cachepeek"
)

// Label is the label of a Component, or of a namespace for the Components
// in it, that names its fence domain.
const Label = "fencegate.dev/domain"

// MaxServed bounds the domains one fencegate serves: each runs a fence
// agent (a declaration every few seconds), a Fence object and a policy
// snapshot of its own.
const MaxServed = 100

// Namespaces tells the domain label of a namespace.
type Namespaces interface {
	// DomainLabel returns the value of the namespace's Label; "" when it
	// has none or the namespace is not known.
	DomainLabel(ctx context.Context, namespace string) (string, error)
}

// Resolver finds the domain of an object.
type Resolver struct {
	// Default is the domain of an object that neither it nor its namespace
	// labels.
	Default string
	// Namespaces gives the namespaces' labels; nil when namespaces name no
	// domains.
	Namespaces Namespaces
}

// Of returns the domain of the object in namespace whose Label is label
// ("" when it has none): label, else the namespace's, else the default.
// The domain is not checked: one this fencegate does not serve is decided
// as such.
func (r Resolver) Of(ctx context.Context, namespace, label string) (string, error) {
	if label != "" {
		return label, nil
	}
	if r.Namespaces != nil && namespace != "" {
		ns, err := r.Namespaces.DomainLabel(ctx, namespace)
		if err != nil {
			return "", fmt.Errorf("the fence domain of namespace %s: %w", namespace, err)
		}
		if ns != "" {
			return ns, nil
		}
	}
	return r.Default, nil
}

// Served returns the domains one fencegate serves, the default first and
// then the others as given without repeats, checking each name and their
// number.
func Served(def string, others []string) ([]string, error) {
	served := []string{def}
	var errs []error
	if err := rpctypes.ValidateDomain(def); err != nil {
		errs = append(errs, fmt.Errorf("default domain: %w", err))
	}
	for _, d := range others {
		if slices.Contains(served, d) {
			continue
		}
		if err := rpctypes.ValidateDomain(d); err != nil {
			errs = append(errs, err)
			continue
		}
		served = append(served, d)
	}
	if len(served) > MaxServed {
		errs = append(errs, fmt.Errorf("%d domains: one fencegate serves at most %d (each has its own agent, Fence and policy snapshot); run another release for more", len(served), MaxServed))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return served, nil
}

// NamespaceLabels reads the namespaces' domain labels, from the manager's
// cache in production: it asks for one on every admission and gated
// reconcile, so it reads the cached Namespace without copying it.
type NamespaceLabels struct {
	namespaces *cachepeek.Peeker
	live       client.Reader
}

// NewNamespaceLabels reads the namespaces through reader, from the stores
// of informers when set (reader's own informers: the manager's cache is
// both). live, when set, is asked when reader does not know the namespace:
// a namespace made a moment ago may not be in the cache yet, and its
// objects must not be taken for the default domain's meanwhile.
func NewNamespaceLabels(informers cache.Informers, reader, live client.Reader) NamespaceLabels {
	return NamespaceLabels{namespaces: cachepeek.New(informers, reader, &corev1.Namespace{}), live: live}
}

// DomainLabel returns the Label of namespace; "" when the namespace is
// not known.
func (n NamespaceLabels) DomainLabel(ctx context.Context, namespace string) (string, error) {
	ns, found, err := n.namespaces.Get(ctx, client.ObjectKey{Name: namespace})
	if err == nil && !found && n.live != nil {
		var live corev1.Namespace
		switch err = n.live.Get(ctx, client.ObjectKey{Name: namespace}, &live); {
		case apierrors.IsNotFound(err):
			err = nil
		case err == nil:
			ns, found = &live, true
		}
	}
	switch {
	case err != nil:
		return "", fmt.Errorf("read namespace %s: %w", namespace, err)
	case !found:
		return "", nil
	}
	return ns.GetLabels()[Label], nil
}

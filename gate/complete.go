package gate

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Conditioned is an object whose status.conditions the Gate marks
// SourceConflict while its cluster does not hold the object's fence, as
// Flux's runtime/conditions Getter reads them. The conditions must be at
// status.conditions (a list keyed by type, as metav1.Condition is
// everywhere): the Gate applies the condition there by server-side apply.
// A type that does not implement it is not marked.
type Conditioned interface {
	client.Object
	// GetConditions is the object's status.conditions.
	GetConditions() []metav1.Condition
}

// ReconcilerOption changes what Reconciler and Complete do with the
// reconciled objects.
type ReconcilerOption func(*reconcilerConfig)

// reconcilerConfig is what ReconcilerOptions set.
type reconcilerConfig struct {
	// noConditions says not to mark SourceConflict.
	noConditions bool
}

// WithoutConditions says not to mark SourceConflict on the reconciled
// objects though their type is Conditioned: another controller owns
// that condition, and a write of the Gate's would be refused or fought
// over.
func WithoutConditions() ReconcilerOption {
	return func(c *reconcilerConfig) { c.noConditions = true }
}

func (o ReconcilerOption) applyComplete(c *completeConfig) { c.reconciler = append(c.reconciler, o) }

// CompleteOption changes what Complete sets up. Every ReconcilerOption is
// one.
type CompleteOption interface {
	applyComplete(*completeConfig)
}

// completeConfig is what CompleteOptions set.
type completeConfig struct {
	reconciler []ReconcilerOption
	// gated are the kinds the client gates besides the reconciled one.
	gated []client.Object
	// forOptions are passed to the builder's For.
	forOptions []builder.ForOption
}

type completeFunc func(*completeConfig)

func (f completeFunc) applyComplete(c *completeConfig) { f(c) }

// AlsoGate says that the client Complete hands the reconciler gates the
// writes of objs' kinds too, besides the reconciled kind's: the objects
// the reconciler creates for each reconciled one, when fencegate's webhook
// fences their kinds.
func AlsoGate(objs ...client.Object) CompleteOption {
	return completeFunc(func(c *completeConfig) { c.gated = append(c.gated, objs...) })
}

// ForOptions are passed to the builder's For(obj), such as
// builder.WithPredicates.
func ForOptions(opts ...builder.ForOption) CompleteOption {
	return completeFunc(func(c *completeConfig) { c.forOptions = append(c.forOptions, opts...) })
}

// Complete builds the controller of b for the objects like obj (a pointer
// to a registered type) behind the Gate, in one call that names obj once:
//   - b.For(obj): the controller reconciles obj's kind (b must not have a
//     For already; Complete returns the builder's error if it has);
//   - b.WatchesRawSource(g.Source(obj)): every object of the kind is
//     reconciled again on each transition of its domain's fence, not at
//     its next requeue;
//   - newReconciler is handed g.Client of the manager's client for obj's
//     kind (and AlsoGate's): the reconciler's writes obey the fence;
//   - b.Complete(g.Reconciler(obj, r)): the reconciler runs only while
//     this cluster holds the fence of the object's domain.
//
// Client, Source and Reconciler stay public for a controller that needs
// them apart.
func (g *Gate) Complete(b *builder.Builder, obj client.Object, newReconciler func(client.Client) reconcile.Reconciler, opts ...CompleteOption) error {
	var cfg completeConfig
	for _, o := range opts {
		o.applyComplete(&cfg)
	}
	writes, err := g.Client(g.client, append([]client.Object{obj}, cfg.gated...)...)
	if err != nil {
		return err
	}
	r := newReconciler(writes)
	if r == nil {
		return fmt.Errorf("gate: the reconciler of %T is nil", obj)
	}
	if err := b.For(obj, cfg.forOptions...).WatchesRawSource(g.Source(obj)).Complete(g.Reconciler(obj, r, cfg.reconciler...)); err != nil {
		return fmt.Errorf("gate: build the controller of %T: %w", obj, err)
	}
	return nil
}

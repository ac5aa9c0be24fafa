package gate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencegate/fencegate/domain"
)

// Client wraps c so that its writes of the gated kinds (the kinds of
// gated, pointers to registered types) obey the fence of the domain of
// the object each writes (its fencegate.dev/domain label as the write
// carries it, else its namespace's, else Options.Domain), never that of
// the reconcile that makes it:
//   - while this cluster does not hold it, creates, updates, patches and
//     deletes fail with a *FencedError (errors.Is(err, ErrFenced));
//   - a write into the domain of a gated reconcile runs under that
//     reconcile's hold: it fails once the hold changed, and is cancelled in
//     flight when the cluster stops holding;
//   - a write into another domain runs under that domain's hold as well,
//     taken for the write: it fails if this cluster does not hold it, and
//     is cancelled in flight when either hold ends;
//   - creates, updates, server-side applies and patches computed from the
//     object (merge, strategic merge, apply) assert the token of the hold
//     of the object's domain in WriteTokenAnnotation, which fencegate's
//     webhook checks and removes.
//
// Reads, and writes of other kinds, pass through. Once the Gate runs, it
// reports each gated kind that no fencegate webhook fences
// (fencegate_gate_unfenced_kinds).
func (g *Gate) Client(c client.Client, gated ...client.Object) (client.Client, error) {
	kinds := map[schema.GroupVersionKind]bool{}
	for _, obj := range gated {
		gvk, err := g.gvkOf(obj)
		if err != nil {
			return nil, err
		}
		kinds[gvk] = true
		g.webhooks.add(gvk)
	}
	return &gatedClient{Client: c, g: g, kinds: kinds}, nil
}

type gatedClient struct {
	client.Client
	g     *Gate
	kinds map[schema.GroupVersionKind]bool
}

// guard runs write for obj under the fence of obj's own domain: at once
// when obj is not of a gated kind; else under the reconcile's hold when
// obj is in the reconcile's domain, and under its domain's hold now
// otherwise (outside a reconcile, or a write into another domain), with
// that hold's token asserted when stamp is set.
func (c *gatedClient) guard(ctx context.Context, obj client.Object, stamp bool, write func(context.Context) error) error {
	gvk, err := c.g.gvkOf(obj)
	if err != nil || !c.kinds[gvk] {
		return write(ctx)
	}
	if LocalOnly(ctx) && obj.GetDeletionTimestamp() != nil {
		// The teardown of a deleted object on a cluster that does not
		// hold its fence: its finalizer may go (the webhook admits that),
		// with no token to assert.
		return write(ctx)
	}
	// The object's own domain: its label as this write carries it (an
	// object gone from the cache is judged by what the caller sends),
	// else its namespace's, else the default; never the reconcile's.
	d, err := c.g.DomainOf(ctx, obj.GetNamespace(), obj.GetLabels()[domain.Label])
	if err != nil {
		return err
	}
	hc, inReconcile := holdFrom(ctx)
	if !inReconcile || hc.hold.Domain != d {
		// Begun under ctx, a reconcile's hold included: the write ends
		// when either hold does.
		h, held, done := c.g.begin(ctx, d)
		defer done()
		if !h.Holding {
			return &FencedError{Hold: h}
		}
		ctx = held
		hc, _ = holdFrom(held)
	}
	if err := context.Cause(hc); err != nil && errors.Is(err, ErrFenced) {
		return err
	}
	if stamp {
		annotations := obj.GetAnnotations()
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[WriteTokenAnnotation] = strconv.FormatInt(hc.hold.Token, 10)
		obj.SetAnnotations(annotations)
	}
	err = write(ctx)
	if cause := context.Cause(hc); err != nil && errors.Is(cause, ErrFenced) {
		return fmt.Errorf("%w (the write was cancelled: %w)", cause, err)
	}
	return err
}

func (c *gatedClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	return c.guard(ctx, obj, true, func(ctx context.Context) error { return c.Client.Create(ctx, obj, opts...) })
}

func (c *gatedClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	return c.guard(ctx, obj, true, func(ctx context.Context) error { return c.Client.Update(ctx, obj, opts...) })
}

// Patch asserts the token when the patch's data is computed from the
// object (client.MergeFrom, client.Merge, client.Apply): the data is
// computed once, after the annotation is set. A patch that does not carry
// the annotation then (client.RawPatch, a JSON patch) is sent as it is,
// gated but without the assertion.
func (c *gatedClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	return c.guard(ctx, obj, true, func(ctx context.Context) error {
		data, err := patch.Data(obj)
		if err != nil {
			return fmt.Errorf("gate: compute the patch: %w", err)
		}
		return c.Client.Patch(ctx, obj, client.RawPatch(patch.Type(), data), opts...)
	})
}

// Apply gates a server-side apply like a patch computed from the object:
// the applied configuration asserts the token.
func (c *gatedClient) Apply(ctx context.Context, ac runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	if !c.mayGate(ac) {
		return c.Client.Apply(ctx, ac, opts...)
	}
	a, err := appliedObject(ac)
	if err != nil {
		return err
	}
	return c.guard(ctx, a.obj, true, func(ctx context.Context) error { return a.answer(c.Client.Apply(ctx, a.config, opts...)) })
}

func (c *gatedClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	return c.guard(ctx, obj, false, func(ctx context.Context) error { return c.Client.Delete(ctx, obj, opts...) })
}

// DeleteAllOf of a gated kind is refused: its objects may span domains.
func (c *gatedClient) DeleteAllOf(ctx context.Context, obj client.Object, opts ...client.DeleteAllOfOption) error {
	if gvk, err := c.g.gvkOf(obj); err == nil && c.kinds[gvk] {
		return fmt.Errorf("gate: DeleteAllOf %s is not gated (its objects may be in several fence domains): delete them one by one", gvk.Kind)
	}
	return c.Client.DeleteAllOf(ctx, obj, opts...)
}

func (c *gatedClient) Status() client.SubResourceWriter { return c.SubResource("status") }

func (c *gatedClient) SubResource(name string) client.SubResourceClient {
	return &gatedSubResource{SubResourceClient: c.Client.SubResource(name), c: c}
}

// gatedSubResource gates the writes of a subresource (status) like those
// of the object; they assert no token, since a subresource write does not
// change the object's annotations.
type gatedSubResource struct {
	client.SubResourceClient
	c *gatedClient
}

func (s *gatedSubResource) Create(ctx context.Context, obj, sub client.Object, opts ...client.SubResourceCreateOption) error {
	return s.c.guard(ctx, obj, false, func(ctx context.Context) error { return s.SubResourceClient.Create(ctx, obj, sub, opts...) })
}

func (s *gatedSubResource) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	return s.c.guard(ctx, obj, false, func(ctx context.Context) error { return s.SubResourceClient.Update(ctx, obj, opts...) })
}

func (s *gatedSubResource) Apply(ctx context.Context, ac runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
	if !s.c.mayGate(ac) {
		return s.SubResourceClient.Apply(ctx, ac, opts...)
	}
	a, err := appliedObject(ac)
	if err != nil {
		return err
	}
	return s.c.guard(ctx, a.obj, false, func(ctx context.Context) error {
		return a.answer(s.SubResourceClient.Apply(ctx, a.config, opts...))
	})
}

func (s *gatedSubResource) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	return s.c.guard(ctx, obj, false, func(ctx context.Context) error { return s.SubResourceClient.Patch(ctx, obj, patch, opts...) })
}

// typedApplied is what a generated (typed) applied configuration tells of
// its kind without being encoded.
type typedApplied interface {
	GetAPIVersion() *string
	GetKind() *string
}

// mayGate says whether ac may be of a gated kind: false only when a typed
// configuration names a kind that is not, which then passes without being
// encoded and read.
func (c *gatedClient) mayGate(ac runtime.ApplyConfiguration) bool {
	t, ok := ac.(typedApplied)
	if _, isObject := ac.(client.Object); isObject || !ok || t.GetAPIVersion() == nil || t.GetKind() == nil {
		return true
	}
	gv, err := schema.ParseGroupVersion(*t.GetAPIVersion())
	return err != nil || c.kinds[gv.WithKind(*t.GetKind())]
}

// applied is a server-side apply as the gate handles it: obj is what the
// gate reads the kind, namespace, labels and deletion of, and stamps;
// config is what is sent; answer copies the API server's answer into the
// caller's configuration once the apply returned err.
type applied struct {
	obj    client.Object
	config runtime.ApplyConfiguration
	answer func(err error) error
}

// appliedObject reads ac for the gate. An unstructured configuration
// (client.ApplyConfigurationFromUnstructured) is an object already; a
// typed one is read through its JSON, which is sent instead, and the
// answer is copied back into it.
func appliedObject(ac runtime.ApplyConfiguration) (applied, error) {
	if obj, ok := ac.(client.Object); ok {
		return applied{obj: obj, config: ac, answer: func(err error) error { return err }}, nil
	}
	data, err := json.Marshal(ac)
	u := &unstructured.Unstructured{}
	if err == nil {
		err = u.UnmarshalJSON(data)
	}
	if err != nil {
		return applied{}, fmt.Errorf("gate: read the applied configuration %T: %w", ac, err)
	}
	return applied{obj: u, config: client.ApplyConfigurationFromUnstructured(u), answer: func(err error) error {
		if err != nil {
			return err
		}
		answer, err := u.MarshalJSON()
		if err == nil {
			err = json.Unmarshal(answer, ac)
		}
		if err != nil {
			return fmt.Errorf("gate: copy the apply's answer into %T: %w", ac, err)
		}
		return nil
	}}, nil
}

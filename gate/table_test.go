package gate_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	appsv1apply "k8s.io/client-go/applyconfigurations/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/gate"
)

// What the table puts on its objects.
const (
	// rowLabel names the row an object belongs to: DeleteAllOf and List
	// select by it.
	rowLabel = "table-row"
	// writtenLabel says which write through the gate changed an object.
	writtenLabel = "written"
	// teardown is the finalizer that keeps a deleted object for its
	// reconcile to remove.
	teardown = "example.com/teardown"
	// tested is the condition that the status writes of a Widget set.
	tested = "Tested"
)

// tableState is one state of domain default's fence, as fencegate writes
// it in the Fence and the replicas' Leases.
type tableState struct {
	name string
	// set writes the state; it runs on the test's own goroutine, where the
	// lab's helpers may fail the test.
	set func()
	// holding says whether the Gate must hold under token.
	holding bool
	token   int64
	// reason is the fence's reason while not holding; message is its
	// message where the lab wrote it in the Fence, "" where the Gate words
	// it (a missing Fence, no live hold proven).
	reason, message string
}

// want is the Gate's hold in the state.
func (s tableState) want() func(gate.Hold) bool {
	switch {
	case s.holding:
		return holding(s.token)
	case s.message != "":
		return func(h gate.Hold) bool { return !h.Holding && h.Reason == s.reason && h.Message == s.message }
	}
	return notHolding(s.reason)
}

// tableKind is a kind the operator writes.
type tableKind struct {
	name string
	// gated says whether the gated client was given the kind; marked,
	// whether the Gate marks a held-back object SourceConflict (a kind
	// with status conditions of metav1.Condition, but a Component, which
	// fencegate's controller marks).
	gated, marked bool
	// proto is an empty object of the kind.
	proto client.Object
	// object is a new object of the kind, labelled for its row.
	object func(name string) client.Object
	list   func() client.ObjectList
	// status is the change of the status writes.
	status statusChange
	// apply is a server-side apply of the row's object that sets
	// writtenLabel to "apply", or with status, the status change.
	apply func(name string, status bool) runtime.ApplyConfiguration
	// reconciler is the gated reconciler of the kind, around inner; nil
	// for the ungated kind, which the Reconciler does not wrap.
	reconciler reconcile.Reconciler
	inner      *writingReconciler
}

// statusChange is a change of an object's status: set makes it, made
// says whether obj has it.
type statusChange struct {
	set  func(client.Object)
	made func(client.Object) bool
}

// observedGeneration is the status change that sets
// status.observedGeneration, at field, to 7.
func observedGeneration(field func(client.Object) *int64) statusChange {
	return statusChange{
		set:  func(obj client.Object) { *field(obj) = 7 },
		made: func(obj client.Object) bool { return *field(obj) == 7 },
	}
}

// writingReconciler reconciles as an operator does, through the gated
// client: it labels a live object, and removes a deleted one's finalizer.
// It records each call, and the token each write asserted.
type writingReconciler struct {
	countingReconciler
	proto  client.Object
	client client.Client
	mu     sync.Mutex
	writes map[string]string
}

func (r *writingReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if _, err := r.countingReconciler.Reconcile(ctx, req); err != nil {
		return reconcile.Result{}, err
	}
	obj := r.proto.DeepCopyObject().(client.Object)
	if err := r.client.Get(ctx, req.NamespacedName, obj); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if obj.GetDeletionTimestamp() != nil {
		obj.SetFinalizers(nil)
	} else {
		obj.SetLabels(map[string]string{rowLabel: req.Name, writtenLabel: "reconcile"})
	}
	if err := r.client.Update(ctx, obj); err != nil {
		return reconcile.Result{}, err
	}
	// The API server answers with the object as it stored it, the
	// annotation the write asserted included: no webhook removes it here.
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writes[req.Name] = obj.GetAnnotations()[gate.WriteTokenAnnotation]
	return reconcile.Result{}, nil
}

// asserted is the token that the write of object name asserted, and
// whether it wrote.
func (r *writingReconciler) asserted(name string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	token, wrote := r.writes[name]
	return token, wrote
}

// callsOf is the reconciler's calls for object name.
func (r *writingReconciler) callsOf(name string) []call {
	var calls []call
	for _, c := range r.called() {
		if c.name == name {
			calls = append(calls, c)
		}
	}
	return calls
}

// tableRow is one state × operation × kind, on an object of its own.
type tableRow struct {
	t     *testing.T
	l     *lab
	c     client.Client
	state tableState
	kind  *tableKind
	name  string
}

// leaves says whether the row's writes leave the gate: always for an
// ungated kind, only while holding for a gated one.
func (r *tableRow) leaves() bool { return r.state.holding || !r.kind.gated }

// key is the key of the row's object.
func (r *tableRow) key() client.ObjectKey {
	return client.ObjectKey{Namespace: "default", Name: r.name}
}

// seed creates the row's object past the gate, as another writer would.
func (r *tableRow) seed(finalizers ...string) client.Object {
	r.t.Helper()
	obj := r.kind.object(r.name)
	obj.SetFinalizers(finalizers)
	if err := r.l.cp.Client.Create(r.l.ctx, obj); err != nil {
		r.t.Fatal(err)
	}
	return obj
}

// stored is the row's object as the API server has it; nil when it has
// none.
func (r *tableRow) stored() client.Object {
	r.t.Helper()
	obj := r.kind.object(r.name)
	switch err := r.l.cp.Client.Get(r.l.ctx, r.key(), obj); {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		r.t.Fatal(err)
	}
	return obj
}

// cached waits until the manager's cache, which the gated reconciler
// reads, has the row's object, deleted or not.
func (r *tableRow) cached(deleted bool) {
	r.t.Helper()
	if err := wait.PollUntilContextTimeout(r.l.ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		obj := r.kind.object(r.name)
		err := r.l.mgr.GetClient().Get(ctx, r.key(), obj)
		return err == nil && (obj.GetDeletionTimestamp() != nil) == deleted, nil
	}); err != nil {
		r.t.Fatalf("the manager's cache never had %s (deleted %v)", r.name, deleted)
	}
}

// checkWrite checks what became of a write: through when it leaves the
// gate, else refused with ErrFenced, naming the fence's reason. It says
// whether the write went through.
func (r *tableRow) checkWrite(err error) bool {
	r.t.Helper()
	if r.leaves() {
		if err != nil {
			r.t.Fatalf("the write failed: %v", err)
		}
		return true
	}
	var fenced *gate.FencedError
	if !errors.Is(err, gate.ErrFenced) || !errors.As(err, &fenced) || fenced.Hold.Reason != r.state.reason {
		r.t.Fatalf("the write returned %v, want ErrFenced with reason %s", err, r.state.reason)
	}
	return false
}

// wantToken is the write-token that a write of the row asserts: the
// hold's token on a gated kind, none on another.
func (r *tableRow) wantToken() string {
	if !r.kind.gated {
		return ""
	}
	return strconv.FormatInt(r.state.token, 10)
}

// checkLabelled checks the stored object after a write that set
// writtenLabel to value: set, with the token asserted, if it went through;
// else as it was seeded.
func (r *tableRow) checkLabelled(through bool, value string) {
	r.t.Helper()
	stored := r.stored()
	if stored == nil {
		r.t.Fatal("the object is gone")
	}
	if !through {
		value = ""
	}
	if got := stored.GetLabels()[writtenLabel]; got != value {
		r.t.Errorf("stored label %s=%q, want %q", writtenLabel, got, value)
	}
	if got, want := stored.GetAnnotations()[gate.WriteTokenAnnotation], r.wantToken(); through && got != want {
		r.t.Errorf("the write asserted token %q, want %q", got, want)
	}
}

// checkStatus checks the stored status after a status write: changed if
// it went through, else as it was seeded.
func (r *tableRow) checkStatus(through bool) {
	r.t.Helper()
	stored := r.stored()
	if stored == nil {
		r.t.Fatal("the object is gone")
	}
	if made := r.kind.status.made(stored); made != through {
		r.t.Errorf("the stored status has the write's change: %v, want %v", made, through)
	}
}

// written is a copy of seed with writtenLabel set to value.
func written(seed client.Object, value string) client.Object {
	obj := seed.DeepCopyObject().(client.Object)
	obj.SetLabels(map[string]string{rowLabel: seed.GetName(), writtenLabel: value})
	return obj
}

// reconcile runs the kind's gated reconciler on the row's object.
func (r *tableRow) reconcile() reconcile.Result {
	r.t.Helper()
	res, err := r.kind.reconciler.Reconcile(r.l.ctx, reconcile.Request{NamespacedName: r.key()})
	if err != nil {
		r.t.Fatalf("the reconcile failed: %v (a held-back one requeues without an error)", err)
	}
	return res
}

// checkHandedOver checks a reconcile that the gate hands to the reconciler
// whatever the state (a deletion): called once, flagged LocalOnly unless
// holding, with the reconciler's own result.
func (r *tableRow) checkHandedOver(res reconcile.Result) {
	r.t.Helper()
	if got, want := r.kind.inner.callsOf(r.name), (call{r.name, !r.state.holding}); len(got) != 1 || got[0] != want {
		r.t.Errorf("reconciler called %+v, want %+v", got, want)
	}
	if res != (reconcile.Result{}) {
		r.t.Errorf("result %+v, want the reconciler's", res)
	}
}

// tableOperation is what an operator does with an object of a kind.
type tableOperation struct {
	name string
	// reconcile marks the operations of the gated reconciler, which the
	// ungated kind has none of.
	reconcile bool
	run       func(r *tableRow)
}

var tableOperations = []tableOperation{
	{name: "reconcile", reconcile: true, run: func(r *tableRow) {
		seed := r.seed()
		r.cached(false)
		res := r.reconcile()
		calls := r.kind.inner.callsOf(r.name)
		stored := r.stored()
		if stored == nil {
			r.t.Fatal("the object is gone")
		}
		if r.state.holding {
			if len(calls) != 1 || calls[0].localOnly {
				r.t.Errorf("reconciler called %+v, want once, not LocalOnly", calls)
			}
			if res != (reconcile.Result{}) {
				r.t.Errorf("result %+v, want the reconciler's", res)
			}
			// The reconciler's write ran under the reconcile's hold.
			r.checkLabelled(true, "reconcile")
			if r.kind.marked && meta.FindStatusCondition(conditions(stored), fencegatev1alpha1.ConditionSourceConflict) != nil {
				r.t.Errorf("SourceConflict set while holding: %+v", conditions(stored))
			}
			return
		}
		if len(calls) != 0 {
			r.t.Errorf("reconciler called %+v while not holding", calls)
		}
		if res.RequeueAfter != time.Minute {
			r.t.Errorf("result %+v, want a requeue after Options.Requeue", res)
		}
		if !r.kind.marked {
			// Nothing for the Gate to mark: it leaves the object alone.
			if stored.GetResourceVersion() != seed.GetResourceVersion() {
				r.t.Errorf("the object was written (resourceVersion %s, seeded %s)", stored.GetResourceVersion(), seed.GetResourceVersion())
			}
			return
		}
		c := meta.FindStatusCondition(conditions(stored), fencegatev1alpha1.ConditionSourceConflict)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != r.state.reason || c.Message == "" ||
			r.state.message != "" && c.Message != r.state.message {
			r.t.Errorf("SourceConflict = %+v, want True with reason %s and message %q (the Gate's own words where empty)", c, r.state.reason, r.state.message)
		}
	}},
	{name: "reconcile-deleting", reconcile: true, run: func(r *tableRow) {
		seed := r.seed(teardown)
		if err := r.l.cp.Client.Delete(r.l.ctx, seed); err != nil {
			r.t.Fatal(err)
		}
		r.cached(true)
		r.checkHandedOver(r.reconcile())
		// The finalizer's removal passes even where the cluster does not
		// hold the fence; it asserts the token only under a hold.
		token, wrote := r.kind.inner.asserted(r.name)
		want := ""
		if r.state.holding {
			want = r.wantToken()
		}
		if !wrote || token != want {
			r.t.Errorf("the finalizer's removal wrote %v asserting token %q, want it written asserting %q", wrote, token, want)
		}
		if r.stored() != nil {
			r.t.Error("the object outlived the removal of its finalizer")
		}
	}},
	{name: "reconcile-gone", reconcile: true, run: func(r *tableRow) {
		r.checkHandedOver(r.reconcile())
	}},
	{name: "create", run: func(r *tableRow) {
		through := r.checkWrite(r.c.Create(r.l.ctx, r.kind.object(r.name)))
		stored := r.stored()
		switch {
		case through && stored == nil:
			r.t.Fatal("created, but not stored")
		case through:
			if got := stored.GetAnnotations()[gate.WriteTokenAnnotation]; got != r.wantToken() {
				r.t.Errorf("the create asserted token %q, want %q", got, r.wantToken())
			}
		case stored != nil:
			r.t.Error("refused, but stored")
		}
	}},
	{name: "update", run: func(r *tableRow) {
		seed := r.seed()
		r.checkLabelled(r.checkWrite(r.c.Update(r.l.ctx, written(seed, "update"))), "update")
	}},
	{name: "patch", run: func(r *tableRow) {
		seed := r.seed()
		r.checkLabelled(r.checkWrite(r.c.Patch(r.l.ctx, written(seed, "patch"), client.MergeFrom(seed))), "patch")
	}},
	{name: "apply", run: func(r *tableRow) {
		r.seed()
		r.checkLabelled(r.checkWrite(r.c.Apply(r.l.ctx, r.kind.apply(r.name, false), client.FieldOwner("table"))), "apply")
	}},
	{name: "delete", run: func(r *tableRow) {
		through := r.checkWrite(r.c.Delete(r.l.ctx, r.seed()))
		if gone := r.stored() == nil; gone != through {
			r.t.Errorf("the object gone: %v, want %v", gone, through)
		}
	}},
	{name: "delete-all-of", run: func(r *tableRow) {
		r.seed()
		err := r.c.DeleteAllOf(r.l.ctx, r.kind.object(r.name), client.InNamespace("default"), client.MatchingLabels{rowLabel: r.name})
		gone := r.stored() == nil
		if !r.kind.gated {
			if err != nil || !gone {
				r.t.Errorf("DeleteAllOf of an ungated kind: %v, the object gone: %v; want it through", err, gone)
			}
			return
		}
		// The gated client refuses DeleteAllOf of a gated kind whatever
		// the state: the objects it selects may be in several domains.
		// Which error it refuses with is left open (not ErrFenced while
		// holding, since no fence stops it); that nothing goes is not.
		if err == nil || gone {
			r.t.Errorf("DeleteAllOf of a gated kind: %v, the object gone: %v; want it refused", err, gone)
		}
	}},
	{name: "status-update", run: func(r *tableRow) {
		obj := r.seed().DeepCopyObject().(client.Object)
		r.kind.status.set(obj)
		r.checkStatus(r.checkWrite(r.c.Status().Update(r.l.ctx, obj)))
	}},
	{name: "status-patch", run: func(r *tableRow) {
		seed := r.seed()
		obj := seed.DeepCopyObject().(client.Object)
		r.kind.status.set(obj)
		r.checkStatus(r.checkWrite(r.c.Status().Patch(r.l.ctx, obj, client.MergeFrom(seed))))
	}},
	{name: "status-apply", run: func(r *tableRow) {
		r.seed()
		r.checkStatus(r.checkWrite(r.c.Status().Apply(r.l.ctx, r.kind.apply(r.name, true), client.FieldOwner("table"))))
	}},
	{name: "get", run: func(r *tableRow) {
		seed := r.seed()
		got := r.kind.object("")
		if err := r.c.Get(r.l.ctx, r.key(), got); err != nil || got.GetUID() != seed.GetUID() {
			r.t.Errorf("Get: %v, UID %q; want the seeded object %q", err, got.GetUID(), seed.GetUID())
		}
	}},
	{name: "list", run: func(r *tableRow) {
		seed := r.seed()
		list := r.kind.list()
		if err := r.c.List(r.l.ctx, list, client.InNamespace("default"), client.MatchingLabels{rowLabel: r.name}); err != nil {
			r.t.Fatalf("List: %v", err)
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			r.t.Fatal(err)
		}
		if len(items) != 1 || items[0].(client.Object).GetUID() != seed.GetUID() {
			r.t.Errorf("List found %d objects, want the seeded one", len(items))
		}
	}},
}

// conditions is the status.conditions of a marked kind's object.
func conditions(obj client.Object) []metav1.Condition {
	return obj.(*Widget).Status.Conditions
}

// applied is a server-side apply of the object of kind gvk named name in
// an unstructured configuration, which the Gate reads as an object: fields
// are its own fields.
func applied(gvk schema.GroupVersionKind, name string, fields map[string]any) runtime.ApplyConfiguration {
	u := &unstructured.Unstructured{Object: fields}
	u.SetGroupVersionKind(gvk)
	u.SetNamespace("default")
	u.SetName(name)
	return client.ApplyConfigurationFromUnstructured(u)
}

// podTemplate is the selector and pod template of a workload named name.
func podTemplate(name string) (*metav1.LabelSelector, corev1.PodTemplateSpec) {
	labels := map[string]string{"app": name}
	return &metav1.LabelSelector{MatchLabels: labels}, corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
	}
}

// rowMeta is the metadata of row name's object.
func rowMeta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{rowLabel: name}}
}

// TestGateOverEveryStateOperationAndKind drives domain default's fence
// through every state the Fence and the replicas' Leases can tell, and in
// each runs every operation of the gated reconciler and client on every
// kind: gated kinds with conditions the Gate marks (Widget) and that
// fencegate's controller marks (Component), a gated built-in kind whose
// status conditions are not metav1.Condition (Deployment), and an ungated
// kind (ReplicaSet). Only a live hold (active, Holding True, a replica's
// Lease of the token not yet ended) runs a reconcile and lets a gated
// write leave, creates, updates, patches and applies asserting the hold's
// token. Any other state holds a reconcile back (SourceConflict with the
// fence's reason on a Widget, nothing written on the others, a requeue
// without error), hands a deletion over LocalOnly, and fails gated writes
// with ErrFenced. Reads, and writes of the ungated kind, pass in every
// state.
func TestGateOverEveryStateOperationAndKind(t *testing.T) {
	kinds := []*tableKind{{
		name: "widget", gated: true, marked: true, proto: &Widget{},
		object: func(name string) client.Object { return &Widget{ObjectMeta: rowMeta(name)} },
		list:   func() client.ObjectList { return &WidgetList{} },
		status: statusChange{
			set: func(obj client.Object) {
				meta.SetStatusCondition(&obj.(*Widget).Status.Conditions, metav1.Condition{
					Type: tested, Status: metav1.ConditionTrue, Reason: "StatusWrite", Message: "set by a status write",
				})
			},
			made: func(obj client.Object) bool { return meta.IsStatusConditionTrue(conditions(obj), tested) },
		},
		// No typed apply configurations for the CRDs' kinds: unstructured
		// ones (those of the built-in kinds are typed).
		apply: func(name string, status bool) runtime.ApplyConfiguration {
			if status {
				return applied(widgetVersion.WithKind("Widget"), name, map[string]any{"status": map[string]any{"conditions": []any{map[string]any{
					"type": tested, "status": "True", "reason": "StatusWrite", "message": "set by a status apply", "lastTransitionTime": "2026-01-01T00:00:00Z",
				}}}})
			}
			return applied(widgetVersion.WithKind("Widget"), name, map[string]any{"metadata": map[string]any{"labels": map[string]any{writtenLabel: "apply"}}})
		},
	}, {
		name: "component", gated: true, proto: &fencegatev1alpha1.Component{},
		object: func(name string) client.Object { return &fencegatev1alpha1.Component{ObjectMeta: rowMeta(name)} },
		list:   func() client.ObjectList { return &fencegatev1alpha1.ComponentList{} },
		status: observedGeneration(func(obj client.Object) *int64 {
			return &obj.(*fencegatev1alpha1.Component).Status.ObservedGeneration
		}),
		apply: func(name string, status bool) runtime.ApplyConfiguration {
			gvk := fencegatev1alpha1.GroupVersion.WithKind("Component")
			if status {
				return applied(gvk, name, map[string]any{"status": map[string]any{"observedGeneration": int64(7)}})
			}
			return applied(gvk, name, map[string]any{"metadata": map[string]any{"labels": map[string]any{writtenLabel: "apply"}}})
		},
	}, {
		name: "deployment", gated: true, proto: &appsv1.Deployment{},
		object: func(name string) client.Object {
			selector, template := podTemplate(name)
			return &appsv1.Deployment{ObjectMeta: rowMeta(name), Spec: appsv1.DeploymentSpec{Selector: selector, Template: template}}
		},
		list:   func() client.ObjectList { return &appsv1.DeploymentList{} },
		status: observedGeneration(func(obj client.Object) *int64 { return &obj.(*appsv1.Deployment).Status.ObservedGeneration }),
		apply: func(name string, status bool) runtime.ApplyConfiguration {
			if status {
				return appsv1apply.Deployment(name, "default").WithStatus(appsv1apply.DeploymentStatus().WithObservedGeneration(7))
			}
			return appsv1apply.Deployment(name, "default").WithLabels(map[string]string{writtenLabel: "apply"})
		},
	}, {
		name: "replicaset", proto: &appsv1.ReplicaSet{},
		object: func(name string) client.Object {
			selector, template := podTemplate(name)
			return &appsv1.ReplicaSet{ObjectMeta: rowMeta(name), Spec: appsv1.ReplicaSetSpec{Selector: selector, Template: template}}
		},
		list:   func() client.ObjectList { return &appsv1.ReplicaSetList{} },
		status: observedGeneration(func(obj client.Object) *int64 { return &obj.(*appsv1.ReplicaSet).Status.ObservedGeneration }),
		apply: func(name string, status bool) runtime.ApplyConfiguration {
			if status {
				return appsv1apply.ReplicaSet(name, "default").WithStatus(appsv1apply.ReplicaSetStatus().WithObservedGeneration(7))
			}
			return appsv1apply.ReplicaSet(name, "default").WithLabels(map[string]string{writtenLabel: "apply"})
		},
	}}
	l := newLab(t, func(l *lab) {
		for _, k := range kinds {
			if k.gated {
				k.inner = &writingReconciler{proto: k.proto, writes: map[string]string{}}
				k.reconciler = l.gate.Reconciler(k.proto, k.inner)
			}
		}
	})
	var gated []client.Object
	for _, k := range kinds {
		if k.gated {
			gated = append(gated, k.proto)
		}
	}
	c, err := l.gate.Client(l.cp.Client, gated...)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range kinds {
		if k.inner != nil {
			k.inner.client = c
		}
	}

	notHeld := func(reason, message string) metav1.Condition {
		return metav1.Condition{Type: fencegatev1alpha1.ConditionHolding, Status: metav1.ConditionFalse, Reason: reason, Message: message}
	}
	const (
		acquiring = "the takeover waits for the lease of cluster west to end"
		regressed = "this cluster declared epoch 6, below epoch 7 it once declared"
		unknown   = "the fence authority is unreachable"
		// fencegate maps an unsupported state to FenceUnknown too.
		unsupported = "the fence authority does not implement the fence service"
	)
	// Where the state is not holding, a replica's Lease of the Fence's
	// token stays live, so that what denies is the state alone. The order
	// matters: each state differs from the one before in its reason or
	// message, so that awaiting it waits for its transition (checked
	// below).
	states := []tableState{
		{name: "holding", holding: true, token: 42, set: func() {
			l.fence("default", "active", 42)
			l.lease("default", "a", 42, l.clock.Now().Add(time.Hour))
		}},
		{name: "stale", reason: fencegatev1alpha1.ReasonFenceUnknown, set: func() {
			// A hold believed, then no renewal: every replica died. The
			// Fence still says Holding, and the Lease still publishes the
			// hold, whose end (less the second of skew) the step passes.
			l.fence("default", "active", 43)
			l.lease("default", "a", 43, l.clock.Now().Add(10*time.Second))
			l.await("default", holding(43), "held under the stale state's token")
			l.clock.Step(10 * time.Second)
		}},
		{name: "fenced", reason: fencegatev1alpha1.ReasonClusterFenced, message: `cluster "west" holds the fence at epoch 8`, set: func() {
			l.fence("default", "fenced", 44)
			l.lease("default", "a", 44, l.clock.Now().Add(time.Hour))
		}},
		{name: "no-fence", reason: fencegatev1alpha1.ReasonFenceUnknown, set: func() {
			if err := l.cp.Client.Delete(l.ctx, &fencegatev1alpha1.Fence{ObjectMeta: metav1.ObjectMeta{Name: "default"}}); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "acquiring", reason: fencegatev1alpha1.ReasonFenceAcquiring, message: acquiring, set: func() {
			l.fenceHolding("default", "acquiring", 44, notHeld(fencegatev1alpha1.ReasonFenceAcquiring, acquiring))
		}},
		{name: "unproven", reason: fencegatev1alpha1.ReasonFenceUnknown, set: func() {
			// The Fence says Holding, but no replica's Lease publishes a
			// hold: the replica runs and withdrew it.
			l.fence("default", "active", 45)
			l.lease("default", "a", 0, time.Time{})
		}},
		{name: "epoch-regressed", reason: fencegatev1alpha1.ReasonEpochRegressed, message: regressed, set: func() {
			l.fenceHolding("default", "epoch_regressed", 46, notHeld(fencegatev1alpha1.ReasonEpochRegressed, regressed))
			l.lease("default", "a", 46, l.clock.Now().Add(time.Hour))
		}},
		{name: "unknown", reason: fencegatev1alpha1.ReasonFenceUnknown, message: unknown, set: func() {
			l.fenceHolding("default", "unknown", 46, notHeld(fencegatev1alpha1.ReasonFenceUnknown, unknown))
		}},
		{name: "unsupported", reason: fencegatev1alpha1.ReasonFenceUnknown, message: unsupported, set: func() {
			l.fenceHolding("default", "unsupported", 46, notHeld(fencegatev1alpha1.ReasonFenceUnknown, unsupported))
		}},
	}
	for _, st := range states {
		if before := l.gate.Hold(l.ctx, "default"); st.want()(before) {
			t.Fatalf("state %s cannot be told from the state before it, %+v: awaiting it would not wait for its transition", st.name, before)
		}
		st.set()
		l.await("default", st.want(), "in state "+st.name)
		// The rows of a state run in parallel, and all end before the
		// next state is set.
		t.Run(st.name, func(t *testing.T) {
			for _, op := range tableOperations {
				t.Run(op.name, func(t *testing.T) {
					t.Parallel()
					for _, k := range kinds {
						if op.reconcile && k.reconciler == nil {
							continue
						}
						t.Run(k.name, func(t *testing.T) {
							t.Parallel()
							op.run(&tableRow{t: t, l: l, c: c, state: st, kind: k, name: st.name + "-" + op.name + "-" + k.name})
						})
					}
				})
			}
		})
	}
}

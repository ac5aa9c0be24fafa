package safety

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fencegate/fencegate/domain"
	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/hold"
)

// The model of what fencegate acts on, per cluster: the objects of every
// held kind in a few namespaces (each namespace labelled with a fence
// domain), an actuator per object that acts only while the object, as its
// own delayed view shows it, is not suspended, the hold controller, which
// asks the pod's real engine for data.fencegate.hold.decision and applies
// it with hold.Plan, the membership Leases on which each replica publishes
// its hold, and a gated writer, modelled on package gate: each write is
// decided by the fence of the written object's own domain, as the gate
// sees it through its caches (the Fence and the replicas' published
// holds), and is cancelled when that hold ends. The gate is modelled, not
// called: it is built on a controller-runtime manager and caches, and
// exposes no pure decision.
const (
	// tick is how often the actuators and the hold controller look.
	tick = 10 * time.Millisecond
	// maxWatchDelay bounds how late a watcher (an actuator, the hold
	// controller's cache, the gate's cache) sees a change.
	maxWatchDelay = 30 * time.Millisecond
	// maxPatch bounds the time one hold or release patch takes: the hold
	// controller patches one object at a time.
	maxPatch = 8 * time.Millisecond
	// maxRun bounds an actuator's run (a Job, a reconciliation).
	maxRun = 150 * time.Millisecond
	// quietFor is how long every object of a domain must be held and
	// report nothing running before a holder told CLUSTER_FENCED releases
	// (hold.Options.QuietFor, short for the histories); quietBound how long
	// it waits for quiet at most once everything is held.
	quietFor   = 60 * time.Millisecond
	quietBound = time.Second
	// takeoverGrace is the agents' fenceagent.Options.TakeoverGrace: a
	// holder cut off from the authority starts holding a lease margin
	// before the grant; holding its objects (maxPatch each), its
	// actuators' views (maxWatchDelay) and their runs (maxRun) take less
	// than margin + grace, with room for a loaded machine.
	takeoverGrace = time.Second
	// relabelGrace: an action that begins this soon after its object's
	// namespace was relabelled is counted for the namespace's old domain.
	// A relabel is a handover of its objects between two domains that no
	// fence orders (docs/design.md, "Many domains in one cluster", known
	// gap): both clusters' hold controllers re-decide the objects at once,
	// each at its own pace. Past the grace, an action is counted for the
	// new domain, so a cluster that did not follow the relabel is caught.
	relabelGrace = maxWatchDelay + 16*maxPatch + maxRun + 100*time.Millisecond
	// relabelBound bounds how long an object's actions count for its
	// namespace's old domain while the hold controller has not decided
	// it since the relabel.
	relabelBound = leaseTTL
	// kindsPerNamespace is how many held objects each namespace has.
	kindsPerNamespace = 3
)

// versions keeps every value something took, with when, so that a watcher
// that is delay behind sees the one in force delay ago.
type versions[T any] struct {
	at   []time.Duration
	vals []T
}

func (v *versions[T]) set(at time.Duration, val T) {
	v.at = append(v.at, at)
	v.vals = append(v.vals, val)
}

// latest is the value now; false before any.
func (v *versions[T]) latest() (T, bool) {
	var zero T
	if len(v.vals) == 0 {
		return zero, false
	}
	return v.vals[len(v.vals)-1], true
}

// seen is the value in force at at.
func (v *versions[T]) seen(at time.Duration) (T, bool) {
	var zero T
	i, _ := slices.BinarySearch(v.at, at+1)
	if i == 0 {
		return zero, false
	}
	return v.vals[i-1], true
}

// heldKind is an actuator's kind: the object it acts for, how it reads its
// own suspension, and what it reports while it runs.
type heldKind struct {
	name string
	// resource is the kind's resource, as the hold controller's
	// --hold-kinds names it: the engines are built with every model
	// kind's (engine.Options.HoldKinds), so that they try the hold
	// decision of each before a revision serves.
	resource schema.GroupResource
	// object is the object, not held.
	object func(namespace, name string) map[string]any
	// suspended is how the actuator reads its object.
	suspended func(obj map[string]any) bool
	// report sets what the actuator reports: running, and whether it has
	// seen itself suspended.
	report func(obj map[string]any, running, suspended bool)
	// fields are what the shipped hold policy sets; used only to make the
	// objects held before the history begins.
	fields []engine.HoldField
}

// heldKinds are the kinds of every rule of the shipped hold policy.
var heldKinds = []heldKind{
	{
		name:     "cronjob",
		resource: schema.GroupResource{Group: "batch", Resource: "cronjobs"},
		object: func(ns, name string) map[string]any {
			return kobject("batch/v1", "CronJob", ns, name, map[string]any{"schedule": "* * * * *", "suspend": false})
		},
		suspended: func(o map[string]any) bool { return at(o, "spec", "suspend") == true },
		report: func(o map[string]any, running, _ bool) {
			status := map[string]any{}
			if running {
				status["active"] = []any{map[string]any{"kind": "Job", "name": "run"}}
			}
			o["status"] = status
		},
		fields: []engine.HoldField{{Path: []string{"spec", "suspend"}, Value: true}},
	},
	{
		name:     "argo-cronworkflow",
		resource: schema.GroupResource{Group: "argoproj.io", Resource: "cronworkflows"},
		object: func(ns, name string) map[string]any {
			return kobject("argoproj.io/v1alpha1", "CronWorkflow", ns, name, map[string]any{"schedule": "* * * * *"})
		},
		suspended: func(o map[string]any) bool { return at(o, "spec", "suspend") == true },
		report: func(o map[string]any, running, _ bool) {
			status := map[string]any{}
			if running {
				status["active"] = []any{map[string]any{"kind": "Workflow", "name": "run"}}
			}
			o["status"] = status
		},
		fields: []engine.HoldField{{Path: []string{"spec", "suspend"}, Value: true}},
	},
	{
		name:     "flux-kustomization",
		resource: schema.GroupResource{Group: "kustomize.toolkit.fluxcd.io", Resource: "kustomizations"},
		object: func(ns, name string) map[string]any {
			return kobject("kustomize.toolkit.fluxcd.io/v1", "Kustomization", ns, name, map[string]any{"interval": "1m", "path": "./"})
		},
		suspended: func(o map[string]any) bool { return at(o, "spec", "suspend") == true },
		report: func(o map[string]any, running, _ bool) {
			ready := map[string]any{"type": "Ready", "status": "True", "reason": "ReconciliationSucceeded"}
			conditions := []any{ready}
			if running {
				ready["status"], ready["reason"] = "Unknown", "Progressing"
				conditions = append(conditions, map[string]any{"type": "Reconciling", "status": "True", "reason": "Progressing"})
			}
			o["status"] = map[string]any{"conditions": conditions}
		},
		fields: []engine.HoldField{{Path: []string{"spec", "suspend"}, Value: true}},
	},
	{
		name:     "flux-helmrelease",
		resource: schema.GroupResource{Group: "helm.toolkit.fluxcd.io", Resource: "helmreleases"},
		object: func(ns, name string) map[string]any {
			return kobject("helm.toolkit.fluxcd.io/v2", "HelmRelease", ns, name, map[string]any{"interval": "1m"})
		},
		suspended: func(o map[string]any) bool { return at(o, "spec", "suspend") == true },
		report: func(o map[string]any, running, _ bool) {
			ready := map[string]any{"type": "Ready", "status": "True", "reason": "UpgradeSucceeded"}
			if running {
				ready["status"], ready["reason"] = "Unknown", "Progressing"
			}
			o["status"] = map[string]any{"conditions": []any{ready}}
		},
		fields: []engine.HoldField{{Path: []string{"spec", "suspend"}, Value: true}},
	},
	{
		name:     "argocd-application",
		resource: schema.GroupResource{Group: "argoproj.io", Resource: "applications"},
		object: func(ns, name string) map[string]any {
			return kobject("argoproj.io/v1alpha1", "Application", ns, name, map[string]any{"syncPolicy": map[string]any{"automated": map[string]any{"prune": true}}})
		},
		suspended: func(o map[string]any) bool { return at(o, "spec", "syncPolicy", "automated", "enabled") == false },
		report: func(o map[string]any, running, _ bool) {
			phase := "Succeeded"
			if running {
				phase = "Running"
			}
			o["status"] = map[string]any{"operationState": map[string]any{"phase": phase}}
		},
		fields: []engine.HoldField{{Path: []string{"spec", "syncPolicy", "automated", "enabled"}, Value: false}},
	},
	{
		name:     "crossplane-managed",
		resource: schema.GroupResource{Group: "s3.aws.upbound.io", Resource: "buckets"},
		object: func(ns, name string) map[string]any {
			return kobject("s3.aws.upbound.io/v1beta1", "Bucket", ns, name, map[string]any{"forProvider": map[string]any{"region": "eu-west-1"}, "managementPolicies": []any{"*"}})
		},
		suspended: func(o map[string]any) bool {
			p, _ := at(o, "spec", "managementPolicies").([]any)
			return len(p) == 1 && p[0] == "Observe"
		},
		report: func(o map[string]any, running, _ bool) {
			reason := "Success"
			if running {
				reason = "Ongoing"
			}
			o["status"] = map[string]any{"conditions": []any{map[string]any{"type": "AsyncOperation", "status": "True", "reason": reason}}}
		},
		fields: []engine.HoldField{{Path: []string{"spec", "managementPolicies"}, Value: []any{"Observe"}}},
	},
	{
		name:     "keda-scaledobject",
		resource: schema.GroupResource{Group: "keda.sh", Resource: "scaledobjects"},
		object: func(ns, name string) map[string]any {
			return kobject("keda.sh/v1alpha1", "ScaledObject", ns, name, map[string]any{"scaleTargetRef": map[string]any{"name": name}})
		},
		suspended: func(o map[string]any) bool {
			return at(o, "metadata", "annotations", "autoscaling.keda.sh/paused") == "true"
		},
		// KEDA says Paused=True once it has seen the annotation and
		// stopped scaling.
		report: func(o map[string]any, running, suspended bool) {
			paused := "False"
			if suspended && !running {
				paused = "True"
			}
			o["status"] = map[string]any{"conditions": []any{map[string]any{"type": "Paused", "status": paused}}}
		},
		fields: []engine.HoldField{{Path: []string{"metadata", "annotations", "autoscaling.keda.sh/paused"}, Value: "true"}},
	},
	{
		// A Velero Schedule reports nothing of the Backups it starts:
		// its action is the start of a Backup, short.
		name:     "velero-schedule",
		resource: schema.GroupResource{Group: "velero.io", Resource: "schedules"},
		object: func(ns, name string) map[string]any {
			return kobject("velero.io/v1", "Schedule", ns, name, map[string]any{"schedule": "@every 1m"})
		},
		suspended: func(o map[string]any) bool { return at(o, "spec", "paused") == true },
		report:    func(map[string]any, bool, bool) {},
		fields:    []engine.HoldField{{Path: []string{"spec", "paused"}, Value: true}},
	},
}

// heldResources are the resources of heldKinds.
func heldResources() []schema.GroupResource {
	out := make([]schema.GroupResource, 0, len(heldKinds))
	for _, k := range heldKinds {
		out = append(out, k.resource)
	}
	return out
}

// kobject is an object as the API server returns it.
func kobject(apiVersion, kind, ns, name string, spec map[string]any) map[string]any {
	// Through JSON, as decoded objects are: numbers are float64.
	return clone(map[string]any{
		"apiVersion": apiVersion, "kind": kind,
		"metadata": map[string]any{"name": name, "namespace": ns, "resourceVersion": "1", "generation": 1},
		"spec":     spec,
	})
}

// at is the value at path in obj, nil where there is none.
func at(obj map[string]any, path ...string) any {
	var v any = obj
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// clone deep-copies a JSON object.
func clone(obj map[string]any) map[string]any {
	b, err := json.Marshal(obj)
	if err != nil {
		panic(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return out
}

// kobj is one model object of a cluster, with its actuator's state.
type kobj struct {
	kind      *heldKind
	namespace string
	name      string
	rv        int
	store     versions[map[string]any]
	// actuatorDelay is how far behind its actuator's view is, holdDelay
	// the hold controller's cache.
	actuatorDelay, holdDelay time.Duration
	// released and releasedIn are the fence token and domain the hold
	// controller last released the object (or left it unheld) under: what
	// its actuator's runs are allowed by.
	released   uint64
	releasedIn string
	// held is set while the hold controller's last decision held it.
	held bool
	// quietSince is since when it has been held and reported nothing
	// running, -1 while it does not.
	quietSince time.Duration
	// run is the actuator's run in progress, nil when idle; next is when
	// it may start one.
	run  *Action
	next time.Duration
	// reported is what the actuator last reported: running, suspended.
	reported    [2]bool
	reportedAny bool
	// pending says the object must be decided again (a fence transition,
	// a patch that lost a race); decidedRV and decidedIn are the
	// resourceVersion and domain of the last decision, retryAt when a
	// decision that failed is tried again.
	pending   bool
	decidedRV int
	decidedIn string
	retryAt   time.Duration
	// decidedAt is when the hold controller last decided it.
	decidedAt time.Duration
}

// publication is the hold one replica's membership Lease publishes for a
// domain: its token and the end of its validity; zero token for none.
type publication struct {
	token uint64
	until time.Duration
}

// kcluster is the model of one cluster's API server and the controllers
// that act on it.
type kcluster struct {
	w     *world
	index int
	mu    sync.Mutex
	objs  []*kobj
	// namespaces are the domain labels of the namespaces (a domain's name).
	namespaces map[string]*versions[string]
	// published are the replicas' Lease holds, by pod name and domain.
	published map[string][]*versions[publication]
	// fences are the Fence status of each domain: the hold controller's
	// leader's fence state, as fencegate's controller writes it.
	fences []versions[fencestate.State]
	// gateDelay is how far behind the gate's caches are.
	gateDelay time.Duration
	// handled is, per domain, the fence state the hold controller last
	// re-decided the domain's objects for; dueAt the wall time (ns) at
	// which they are decided again, 0 for none: the state's ResumeAtNS or
	// the end of its validity, whichever comes first, as the hold
	// controller requeues.
	handled []fencestate.State
	dueAt   []int64
}

// world is a history's model of the clusters' Kubernetes side.
type world struct {
	r        *run
	clusters []*kcluster
	// namespaces are the model's namespaces: one per domain, and one that
	// the relabel nemesis moves between domains.
	namespaces []string
	stop       chan struct{}
	done       sync.WaitGroup

	mu      sync.Mutex
	actions []Action
	// The counts of what happened.
	runs, writes, fencedWrites, cancelledWrites, refusedWrites atomic.Int64
	holdErrors, holds, releases, resumeWaits                   atomic.Int64
	leaseFailures, withdrawalsRefused, handoversAwaited        atomic.Int64
	handoverTimeouts, shutdownWithdrawalsRefused               atomic.Int64
}

// newWorld makes the model of the clusters of r, every object held.
func newWorld(r *run) *world {
	w := &world{r: r, stop: make(chan struct{})}
	for d := range r.domains {
		w.namespaces = append(w.namespaces, "ns-"+strconv.Itoa(d))
	}
	w.namespaces = append(w.namespaces, "ns-moving")
	for c := range clusterNames {
		kc := &kcluster{
			w: w, index: c, namespaces: map[string]*versions[string]{}, published: map[string][]*versions[publication]{},
			fences: make([]versions[fencestate.State], len(r.domains)), handled: make([]fencestate.State, len(r.domains)), dueAt: make([]int64, len(r.domains)),
			gateDelay: time.Duration(rand.Int64N(int64(maxWatchDelay))),
		}
		for i, ns := range w.namespaces {
			v := &versions[string]{}
			// Labelled since long before the history, so that every
			// look back (relabelGrace) finds the label.
			v.set(-time.Hour, r.domains[min(i, len(r.domains)-1)])
			kc.namespaces[ns] = v
		}
		for i, ns := range w.namespaces {
			// kindsPerNamespace kinds in each namespace, in turn: every
			// kind is in a history with three or more namespaces, and a
			// decision (a policy evaluation) per object stays affordable
			// under the race detector.
			for j := range kindsPerNamespace {
				kind := &heldKinds[(i*kindsPerNamespace+j)%len(heldKinds)]
				obj := kind.object(ns, kind.name)
				step, err := hold.Plan(obj, engine.HoldDecision{Hold: true, Fields: kind.fields})
				if err != nil {
					r.t.Fatalf("hold %s: %v", kind.name, err)
				}
				obj = owned(applyPatch(r, obj, step.Patch), hold.Holding, kind.fields)
				kind.report(obj, false, true)
				o := &kobj{
					kind: kind, namespace: ns, name: kind.name, rv: 1, held: true, quietSince: -1,
					actuatorDelay: time.Duration(rand.Int64N(int64(maxWatchDelay))),
					holdDelay:     time.Duration(rand.Int64N(int64(maxWatchDelay))),
				}
				o.store.set(0, obj)
				kc.objs = append(kc.objs, o)
			}
		}
		w.clusters = append(w.clusters, kc)
	}
	return w
}

// owned is obj with the managedFields the API server keeps after the hold
// controller's patch: its field manager owns the held fields while they
// are held (nobody else sets them in the model), and nothing once
// released.
func owned(obj map[string]any, action hold.Action, fields []engine.HoldField) map[string]any {
	meta := obj["metadata"].(map[string]any)
	if action != hold.Holding {
		delete(meta, "managedFields")
		return obj
	}
	set := map[string]any{}
	for _, f := range fields {
		m := set
		for _, k := range f.Path {
			next, ok := m["f:"+k].(map[string]any)
			if !ok {
				next = map[string]any{}
				m["f:"+k] = next
			}
			m = next
		}
	}
	meta["managedFields"] = []any{map[string]any{"manager": hold.FieldManager, "operation": "Update", "fieldsV1": set}}
	return obj
}

// applyPatch applies a JSON patch to obj and moves its resourceVersion on.
func applyPatch(r *run, obj map[string]any, patch []hold.Op) map[string]any {
	doc, err := json.Marshal(obj)
	if err != nil {
		r.t.Fatal(err)
	}
	ops, err := json.Marshal(patch)
	if err != nil {
		r.t.Fatal(err)
	}
	p, err := jsonpatch.DecodePatch(ops)
	if err != nil {
		r.t.Fatalf("decode the hold patch %s: %v", ops, err)
	}
	out, err := p.Apply(doc)
	if err != nil {
		r.t.Errorf("apply the hold patch %s: %v", ops, err)
		return obj
	}
	var next map[string]any
	if err := json.Unmarshal(out, &next); err != nil {
		r.t.Fatal(err)
	}
	return next
}

// start runs every cluster's actuators, hold controller and gated writer.
func (w *world) start() {
	for _, kc := range w.clusters {
		w.done.Go(func() { kc.actuate() })
		w.done.Go(func() { kc.holdLoop() })
		w.done.Go(func() { kc.writeLoop() })
	}
}

// end stops them and ends the runs in progress.
func (w *world) end() {
	close(w.stop)
	w.done.Wait()
	now := w.r.since()
	for _, kc := range w.clusters {
		kc.mu.Lock()
		for _, o := range kc.objs {
			if o.run != nil {
				o.run.End = now
				w.record(*o.run)
				o.run = nil
			}
		}
		kc.mu.Unlock()
	}
}

func (w *world) record(a Action) {
	w.mu.Lock()
	w.actions = append(w.actions, a)
	w.mu.Unlock()
}

// stopped says whether the world is stopping, after waiting d.
func (w *world) stopped(d time.Duration) bool {
	select {
	case <-w.stop:
		return true
	case <-time.After(d):
		return false
	}
}

// domainAt is the domain an action of an object of namespace ns that
// begins at now counts for: the namespace's domain on the cluster's API
// server, or the domain the actor was allowed by (decided) when the
// namespace left it within relabelGrace, or after the hold controller
// last decided the object (lookedAt) and within relabelBound: a hold
// controller that lags (a loaded machine runs the histories' clusters
// slower than their schedule) has not yet followed the relabel, one that
// never follows it is caught once the bound is past (under kc.mu).
func (kc *kcluster) domainAt(ns string, now time.Duration, decided string, lookedAt time.Duration) string {
	v := kc.namespaces[ns]
	cur, _ := v.seen(now)
	if decided == cur {
		return cur
	}
	for i := len(v.at) - 1; i > 0 && v.at[i] > now-relabelBound; i-- {
		if v.vals[i-1] == decided && (v.at[i] > now-relabelGrace || v.at[i] > lookedAt) {
			return decided
		}
	}
	return cur
}

// actuate runs the actuators: each looks at its object as its view, delay
// behind, shows it, and starts a run when it is not suspended.
func (kc *kcluster) actuate() {
	w := kc.w
	for !w.stopped(tick) {
		now := w.r.since()
		kc.mu.Lock()
		for _, o := range kc.objs {
			view, _ := o.store.seen(now - o.actuatorDelay)
			suspended := o.kind.suspended(view)
			if o.run != nil && now >= o.run.End {
				w.record(*o.run)
				o.run = nil
				kc.report(o, now, suspended)
			}
			if o.run == nil && !suspended && now >= o.next {
				d := time.Millisecond + time.Duration(rand.Int64N(int64(maxRun)))
				if o.kind.name == "velero-schedule" {
					d = time.Millisecond
				}
				o.run = &Action{
					Actor:   fmt.Sprintf("%s %s %s/%s", clusterNames[kc.index], o.kind.name, o.namespace, o.name),
					Cluster: w.r.sched.uids[kc.index], Domain: kc.domainAt(o.namespace, now, o.releasedIn, o.decidedAt), Token: o.released,
					Start: now, End: now + d,
				}
				o.next = o.run.End + time.Duration(rand.Int64N(int64(4*tick)))
				w.runs.Add(1)
				kc.report(o, now, suspended)
			} else if o.run == nil {
				kc.report(o, now, suspended)
			}
		}
		kc.mu.Unlock()
	}
}

// report writes what o's actuator reports, when it changed (under kc.mu).
func (kc *kcluster) report(o *kobj, now time.Duration, suspended bool) {
	state := [2]bool{o.run != nil, suspended}
	if o.reportedAny && o.reported == state {
		return
	}
	o.reported, o.reportedAny = state, true
	cur, _ := o.store.latest()
	next := clone(cur)
	o.kind.report(next, o.run != nil, suspended)
	if b1, b2 := fmt.Sprint(cur["status"]), fmt.Sprint(next["status"]); b1 == b2 {
		return
	}
	kc.write(o, now, next)
}

// write stores a new version of o (under kc.mu).
func (kc *kcluster) write(o *kobj, now time.Duration, obj map[string]any) {
	o.rv++
	obj["metadata"].(map[string]any)["resourceVersion"] = strconv.Itoa(o.rv)
	o.store.set(now, obj)
}

// leader is the pod whose hold controller and Fence status count: the
// first of the cluster's serving pods, as leader election would pick.
func (kc *kcluster) leader() *pod {
	r := kc.w.r
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.serving[kc.index] {
		if p.engine != nil {
			return p
		}
	}
	return nil
}

// namespaceView is the Namespaces the hold controller's engine resolves
// domains with: the namespaces as its cache shows them.
type namespaceView struct {
	kc    *kcluster
	delay time.Duration
}

func (v namespaceView) DomainLabel(_ context.Context, ns string) (string, error) {
	v.kc.mu.Lock()
	defer v.kc.mu.Unlock()
	if ns, ok := v.kc.namespaces[ns]; ok {
		d, _ := ns.seen(v.kc.w.r.since() - v.delay)
		return d, nil
	}
	return "", nil
}

var _ domain.Namespaces = namespaceView{}

// holdLoop is the hold controller: it decides an object again, one patch
// at a time with the real policy of the leader's engine, when the fence of
// a domain changes (and when a state's ResumeAtNS passes: an active
// domain's objects are held until then), when the object's namespace, as
// its cache shows it, changed domain, and when a held object's actuator
// reported (its quiet is what a handover waits for). Nothing is decided
// on a timer: each decision is a policy evaluation, and the objects a
// cluster runs change their status with every run, which changes no
// released object's decision while the fence stays.
func (kc *kcluster) holdLoop() {
	w := kc.w
	for !w.stopped(tick) {
		p := kc.leader()
		if p == nil {
			continue
		}
		now := w.r.since()
		wall := time.Now().UnixNano()
		changed := false
		for d, name := range w.r.domains {
			st, ok := p.engine.Fence(name)
			if !ok {
				continue
			}
			kc.mu.Lock()
			if last, ok := kc.fences[d].latest(); !ok || !sameFence(last, st) {
				kc.fences[d].set(now, st)
			}
			kc.mu.Unlock()
			if due := kc.dueAt[d]; !sameFence(kc.handled[d], st) || due != 0 && wall >= due {
				kc.handled[d] = st
				kc.dueAt[d] = 0
				for _, at := range []int64{st.ResumeAtNS, st.ValidUntilNS} {
					if at > wall && (kc.dueAt[d] == 0 || at < kc.dueAt[d]) {
						kc.dueAt[d] = at
					}
				}
				changed = true
			}
		}
		kc.mu.Lock()
		var due []*kobj
		for _, o := range kc.objs {
			label, _ := kc.namespaces[o.namespace].seen(now - kc.gateDelay)
			if changed {
				o.pending = true
			}
			if (o.pending || o.held && o.rv != o.decidedRV || label != o.decidedIn) && now >= o.retryAt {
				due = append(due, o)
			}
		}
		kc.mu.Unlock()
		for _, o := range due {
			select {
			case <-w.stop:
				return
			default:
			}
			kc.decide(p, o)
		}
	}
}

// sameFence says whether two fence states decide the same holds.
func sameFence(a, b fencestate.State) bool {
	return a.Status == b.Status && a.Token == b.Token && a.Holder == b.Holder && a.ResumeAtNS == b.ResumeAtNS
}

// decide applies the hold decision to o, as the hold controller does.
func (kc *kcluster) decide(p *pod, o *kobj) {
	w := kc.w
	now := w.r.since()
	// The namespace as the decision reads it is this old.
	looked := now - kc.gateDelay
	ctx := context.Background()
	d, err := p.engine.DomainOf(ctx, o.namespace, "")
	if err != nil {
		w.holdErrors.Add(1)
		kc.retry(o, now)
		return
	}
	kc.mu.Lock()
	obj, _ := o.store.latest()
	obj = clone(obj)
	kc.mu.Unlock()
	decision, err := p.engine.Hold(ctx, d, obj)
	if err != nil {
		// The hold controller holds and releases nothing on an error:
		// the object stays as it is.
		if !errors.Is(err, engine.ErrNotReady) {
			w.holdErrors.Add(1)
		}
		kc.retry(o, now)
		return
	}
	st, _ := p.engine.Fence(d)
	if !decision.Hold && st.ResumeAtNS > time.Now().UnixNano() {
		// Granted after an expiry: held until the takeover grace ends.
		decision.Hold = true
		w.resumeWaits.Add(1)
	}
	step, err := hold.Plan(obj, decision)
	if err != nil {
		w.holdErrors.Add(1)
		kc.retry(o, now)
		return
	}
	if step.Action != hold.Nothing && w.stopped(time.Duration(rand.Int64N(int64(maxPatch)))) {
		return
	}
	now = w.r.since()
	kc.mu.Lock()
	defer kc.mu.Unlock()
	if cur, _ := o.store.latest(); fmt.Sprint(at(cur, "metadata", "resourceVersion")) != fmt.Sprint(at(obj, "metadata", "resourceVersion")) {
		// The object changed since it was read: the patch's test fails,
		// and the next pass decides it again.
		o.pending = true
		return
	}
	if step.Action != hold.Nothing {
		kc.write(o, now, owned(applyPatch(w.r, obj, step.Patch), step.Action, decision.Fields))
		if step.Action == hold.Holding {
			w.holds.Add(1)
		} else {
			w.releases.Add(1)
		}
	}
	// Decided: its own patch asks for no other decision.
	o.pending, o.decidedRV, o.decidedIn, o.decidedAt = false, o.rv, d, looked
	if !decision.Hold {
		o.released, o.releasedIn, o.held, o.quietSince = st.Token, d, false, -1
		return
	}
	o.held = true
	switch {
	case !decision.Quiet:
		o.quietSince = -1
	case o.quietSince < 0:
		o.quietSince = now
	}
}

// retry decides o again a while after a decision failed, as the hold
// controller's queue backs off.
func (kc *kcluster) retry(o *kobj, now time.Duration) {
	kc.mu.Lock()
	defer kc.mu.Unlock()
	o.pending, o.retryAt = true, now+20*tick
}

// handedOver says whether every object of domain d on the cluster is held
// and has been quiet for quietFor, or held for quietBound.
func (kc *kcluster) handedOver(d string, since time.Duration) bool {
	now := kc.w.r.since()
	kc.mu.Lock()
	defer kc.mu.Unlock()
	for _, o := range kc.objs {
		cur, _ := kc.namespaces[o.namespace].latest()
		if cur != d {
			continue
		}
		if !o.held || (o.quietSince < 0 || now-o.quietSince < quietFor) && now-since < quietBound {
			return false
		}
	}
	return true
}

// awaitHandover is fenceagent.Options.AwaitHandover of the pods of kc, for
// domain d: it returns once the hold controller has held every object of
// the domain, quiet, or fails when ctx (the lease's validity) ends first.
func (kc *kcluster) awaitHandover(ctx context.Context, d string) error {
	w := kc.w
	begin := w.r.since()
	for {
		if kc.handedOver(d, begin) {
			w.handoversAwaited.Add(1)
			return nil
		}
		select {
		case <-w.stop:
			return errors.New("the history ends")
		case <-ctx.Done():
			w.handoverTimeouts.Add(1)
			return fmt.Errorf("the objects of domain %s are not held yet: %w", d, context.Cause(ctx))
		case <-time.After(tick / 2):
		}
	}
}

// publish is what a replica's membership Lease says of its hold of domain
// d once its agent wrote s: the hold while active, none otherwise. A pod
// whose Lease writes fail publishes nothing new.
func (kc *kcluster) publish(p *pod, d int, s fencestate.State) {
	if p.leaseFails.Load() {
		kc.w.leaseFailures.Add(1)
		return
	}
	pub := publication{}
	if s.Status == fencestate.Active {
		pub = publication{token: s.Token, until: time.Unix(0, s.ValidUntilNS).Sub(kc.w.r.begin)}
	}
	kc.mu.Lock()
	defer kc.mu.Unlock()
	list := kc.published[p.name]
	if list == nil {
		list = make([]*versions[publication], len(kc.w.r.domains))
		for i := range list {
			list[i] = &versions[publication]{}
		}
		kc.published[p.name] = list
	}
	if last, ok := list[d].latest(); ok && last == pub {
		return
	}
	list[d].set(kc.w.r.since(), pub)
}

// withdraw is fenceagent.Options.BeforeRelease of pod p for domain d: the
// hold its Lease publishes is withdrawn, or the release does not happen.
// handover says the release is a handover's (it followed the wait for the
// objects to be held), not a shutdown's: the refusals of those are what
// the Lease nemesis exists for.
func (kc *kcluster) withdraw(p *pod, d int, handover bool) error {
	if p.leaseFails.Load() {
		if handover {
			kc.w.withdrawalsRefused.Add(1)
		} else {
			kc.w.shutdownWithdrawalsRefused.Add(1)
		}
		return errors.New("the membership Lease cannot be written: the hold it publishes stays until it ends")
	}
	kc.publish(p, d, fencestate.State{Status: fencestate.Fenced})
	return nil
}

// gateHold is the hold of domain d as the gate sees it at now: its Fence
// says active with a token, and a replica's Lease publishes a live hold of
// that token; the end is the latest such hold's.
func (kc *kcluster) gateHold(d string, now time.Duration) (publication, bool) {
	di := slices.Index(kc.w.r.domains, d)
	kc.mu.Lock()
	defer kc.mu.Unlock()
	seenAt := now - kc.gateDelay
	st, ok := kc.fences[di].seen(seenAt)
	if !ok || st.Status != fencestate.Active {
		return publication{}, false
	}
	best := publication{}
	for _, list := range kc.published {
		if pub, ok := list[di].seen(seenAt); ok && pub.token == st.Token && pub.until > best.until {
			best = pub
		}
	}
	return best, best.token != 0 && best.until > now
}

// writeLoop is a gated reconciler: each reconcile, of an object of one
// namespace, writes an object into its own namespace and one into
// another, each decided by the written object's domain as the gate sees
// it (docs/design.md, "The gate"). A quarter of the writes are of a kind that
// fencegate's webhook fences too (a Component, admitted by the pod's
// engine with the write token asserted); the rest only the gate guards.
func (kc *kcluster) writeLoop() {
	w := kc.w
	for !w.stopped(50*time.Millisecond + time.Duration(rand.Int64N(int64(100*time.Millisecond)))) {
		own := rand.IntN(len(w.namespaces))
		other := (own + 1 + rand.IntN(len(w.namespaces)-1)) % len(w.namespaces)
		for _, ns := range []string{w.namespaces[own], w.namespaces[other]} {
			kc.gatedWrite(ns)
		}
	}
}

// gatedWrite writes an object into namespace ns as the gate lets it.
func (kc *kcluster) gatedWrite(ns string) {
	w := kc.w
	now := w.r.since()
	kc.mu.Lock()
	label, _ := kc.namespaces[ns].seen(now - kc.gateDelay)
	d := kc.domainAt(ns, now, label, now)
	kc.mu.Unlock()
	h, holding := kc.gateHold(label, now)
	if !holding {
		w.fencedWrites.Add(1)
		return
	}
	a := Action{
		Actor:   fmt.Sprintf("%s writer into %s", clusterNames[kc.index], ns),
		Cluster: w.r.sched.uids[kc.index], Domain: d, Token: h.token, Start: now,
	}
	w.writes.Add(1)
	end := now + time.Millisecond + time.Duration(rand.Int64N(int64(20*time.Millisecond)))
	for {
		if w.stopped(time.Millisecond) {
			return
		}
		t := w.r.since()
		if cur, ok := kc.gateHold(label, t); !ok || cur.token != h.token {
			// The hold ended: the write's context is cancelled.
			w.cancelledWrites.Add(1)
			a.End = t
			w.record(a)
			return
		}
		if t >= end {
			break
		}
	}
	if rand.IntN(4) == 0 {
		if p := kc.leader(); p != nil && !kc.admitted(p, label, h.token) {
			w.refusedWrites.Add(1)
			return
		}
	}
	a.End = w.r.since()
	w.record(a)
}

// admitted asks p's engine, as fencegate's webhook, to admit a Component
// write into domain d asserting write token token.
func (kc *kcluster) admitted(p *pod, d string, token uint64) bool {
	r := kc.w.r
	di := slices.Index(r.domains, d)
	b := r.bodies[di][rand.IntN(len(r.bodies[di]))]
	body := withWriteToken(r.t, b.body, token)
	select {
	case r.evaluating <- struct{}{}:
	case <-kc.w.stop:
		return false
	}
	res, err := p.engine.Admit(context.Background(), body)
	<-r.evaluating
	return err == nil && res.Decision.Allowed
}

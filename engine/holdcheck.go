package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Bounds of the recent hold inputs a new revision is tried on.
const (
	// recentHoldsSize is how many recent hold inputs are kept.
	recentHoldsSize = 16
	// recentHoldMaxBytes bounds a kept object, as recentReviewMaxBytes
	// bounds a review.
	recentHoldMaxBytes = 64 << 10
	// recentHoldInterval is how often an object of a kind already kept is
	// kept again; the first object of a kind is kept at once.
	recentHoldInterval = time.Second
)

// recentHold is one hold input kept: the object (JSON) and its domain.
type recentHold struct {
	// kind is the object's apiVersion and kind, which the sample keeps
	// one of each of first.
	kind   string
	domain string
	object []byte
}

// recentHolds keeps copies of the last few objects the hold decision was
// evaluated for: the first object of each kind at once, then at most one a
// second. Hold decisions repeat per kind (the hold controller decides
// every object of a kind with the same rules), so one object of each kind
// already tries the rules a real object takes.
type recentHolds struct {
	mu      sync.Mutex
	entries [recentHoldsSize]recentHold
	next    int
	last    time.Time
}

// record keeps a copy of obj, decided without error at now.
func (r *recentHolds) record(domain string, obj map[string]any, now time.Time) {
	kind := objectKind(obj)
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Sub(r.last) < recentHoldInterval && r.holds(kind) {
		return
	}
	// Marshalled only when kept, so that a busy hold controller pays for
	// one copy a second.
	raw, err := json.Marshal(obj)
	if err != nil || len(raw) > recentHoldMaxBytes {
		return
	}
	r.last = now
	r.entries[r.next] = recentHold{kind: kind, domain: domain, object: raw}
	r.next = (r.next + 1) % len(r.entries)
}

// holds reports whether an object of kind is kept; r.mu is held.
func (r *recentHolds) holds(kind string) bool {
	for _, e := range r.entries {
		if e.object != nil && e.kind == kind {
			return true
		}
	}
	return false
}

// list returns the kept inputs.
func (r *recentHolds) list() []recentHold {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []recentHold
	for _, e := range r.entries {
		if e.object != nil {
			out = append(out, e)
		}
	}
	return out
}

// objectKind names an object's apiVersion and kind, as far as it has them.
func objectKind(obj map[string]any) string {
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	return apiVersion + " " + kind
}

// holdProbe is one object the hold decision of a revision is tried on,
// with what to call it in an error.
type holdProbe struct {
	name string
	// domain is the input's domain; "" means the domain of the fence
	// state tried.
	domain string
	object map[string]any
}

// knownHeldKind is what a synthetic object of a resource fencegate's
// shipped rules know is made of.
type knownHeldKind struct {
	apiVersion, kind string
	// spec and status are the synthetic object's, in the shape the
	// actuator writes while it acts, so that the rules' activity is
	// evaluated too.
	spec, status map[string]any
	// extra are more top-level fields (an Argo CD Application's
	// operation).
	extra map[string]any
}

// fluxStatus is a Flux object in the middle of a reconciliation.
func fluxStatus() map[string]any {
	return map[string]any{
		"observedGeneration": int64(1),
		"conditions": []any{
			map[string]any{"type": "Ready", "status": "Unknown", "reason": "Progressing", "message": "reconciliation in progress"},
			map[string]any{"type": "Reconciling", "status": "True", "reason": "Progressing", "message": "reconciliation in progress"},
		},
	}
}

// knownHeldKinds are the resources of the actuators the shipped rules
// hold (policies/hold.rego), by resource.group.
var knownHeldKinds = map[schema.GroupResource]func() knownHeldKind{
	{Group: "batch", Resource: "cronjobs"}: func() knownHeldKind {
		return knownHeldKind{apiVersion: "batch/v1", kind: "CronJob",
			spec:   map[string]any{"schedule": "*/5 * * * *", "suspend": false, "jobTemplate": map[string]any{}},
			status: map[string]any{"active": []any{map[string]any{"kind": "Job", "name": "fencegate-probe-1"}}}}
	},
	{Group: "kustomize.toolkit.fluxcd.io", Resource: "kustomizations"}: func() knownHeldKind {
		return knownHeldKind{apiVersion: "kustomize.toolkit.fluxcd.io/v1", kind: "Kustomization",
			spec:   map[string]any{"interval": "10m", "path": "./", "prune": true, "suspend": false, "sourceRef": map[string]any{"kind": "GitRepository", "name": "fencegate-probe"}},
			status: fluxStatus()}
	},
	{Group: "helm.toolkit.fluxcd.io", Resource: "helmreleases"}: func() knownHeldKind {
		return knownHeldKind{apiVersion: "helm.toolkit.fluxcd.io/v2", kind: "HelmRelease",
			spec:   map[string]any{"interval": "10m", "suspend": false, "chart": map[string]any{"spec": map[string]any{"chart": "fencegate-probe"}}},
			status: fluxStatus()}
	},
	{Group: "argoproj.io", Resource: "applications"}: func() knownHeldKind {
		return knownHeldKind{apiVersion: "argoproj.io/v1alpha1", kind: "Application",
			spec: map[string]any{"project": "default", "syncPolicy": map[string]any{"automated": map[string]any{"prune": true, "selfHeal": true}},
				"source":      map[string]any{"repoURL": "https://git.example.com/probe.git", "path": "."},
				"destination": map[string]any{"server": "https://kubernetes.default.svc", "namespace": "default"}},
			status: map[string]any{"operationState": map[string]any{"phase": "Running", "message": "one resource is syncing"}},
			extra:  map[string]any{"operation": map[string]any{"sync": map[string]any{}}}}
	},
	{Group: "argoproj.io", Resource: "cronworkflows"}: func() knownHeldKind {
		return knownHeldKind{apiVersion: "argoproj.io/v1alpha1", kind: "CronWorkflow",
			spec:   map[string]any{"schedule": "*/5 * * * *", "suspend": false, "workflowSpec": map[string]any{}},
			status: map[string]any{"active": []any{map[string]any{"kind": "Workflow", "name": "fencegate-probe-1"}}}}
	},
	{Group: "keda.sh", Resource: "scaledobjects"}: func() knownHeldKind {
		return knownHeldKind{apiVersion: "keda.sh/v1alpha1", kind: "ScaledObject",
			spec:   map[string]any{"scaleTargetRef": map[string]any{"name": "fencegate-probe"}, "triggers": []any{}},
			status: map[string]any{"conditions": []any{map[string]any{"type": "Paused", "status": "False"}}}}
	},
	{Group: "keda.sh", Resource: "scaledjobs"}: func() knownHeldKind {
		return knownHeldKind{apiVersion: "keda.sh/v1alpha1", kind: "ScaledJob",
			spec:   map[string]any{"jobTargetRef": map[string]any{}, "triggers": []any{}},
			status: map[string]any{"conditions": []any{map[string]any{"type": "Paused", "status": "False"}}}}
	},
	{Group: "velero.io", Resource: "schedules"}: func() knownHeldKind {
		return knownHeldKind{apiVersion: "velero.io/v1", kind: "Schedule",
			spec:   map[string]any{"schedule": "0 * * * *", "paused": false, "template": map[string]any{}},
			status: map[string]any{"phase": "Enabled"}}
	},
}

// holdProbes are the synthetic objects the hold decision of a revision is
// tried on: for each held kind, one as the actuator writes it while it acts
// and one bare (nothing but its name and an empty spec). A resource the
// shipped rules do not know gets its kind from its name (widgets.example.io
// is a Widget of example.io/v1), bare and in the shape of a Crossplane
// managed resource, which the rules match by shape, whatever its group.
// Kinds whose names are not their resource's singular are tried on the
// objects the hold controller decided (recentHolds) once it has.
func holdProbes(kinds []schema.GroupResource) []holdProbe {
	var out []holdProbe
	for _, gr := range kinds {
		known, ok := knownHeldKinds[gr]
		if !ok {
			kind := kindOf(gr.Resource)
			apiVersion := "v1"
			if gr.Group != "" {
				apiVersion = gr.Group + "/v1"
			}
			name := fmt.Sprintf("a synthetic %s (%s)", kind, gr)
			out = append(out,
				holdProbe{name: name, object: syntheticObject(apiVersion, kind, map[string]any{}, nil, nil)},
				holdProbe{name: name + " shaped as a Crossplane managed resource", object: syntheticObject(apiVersion, kind,
					map[string]any{"forProvider": map[string]any{}, "managementPolicies": []any{"*"}},
					map[string]any{"conditions": []any{
						map[string]any{"type": "Synced", "status": "True", "observedGeneration": int64(1)},
						map[string]any{"type": "AsyncOperation", "status": "True", "reason": "Ongoing"},
					}}, nil)})
			continue
		}
		k := known()
		name := fmt.Sprintf("a synthetic %s (%s)", k.kind, gr)
		out = append(out,
			holdProbe{name: name, object: syntheticObject(k.apiVersion, k.kind, k.spec, k.status, k.extra)},
			holdProbe{name: "a bare " + strings.TrimPrefix(name, "a "), object: syntheticObject(k.apiVersion, k.kind, map[string]any{}, nil, nil)})
	}
	return out
}

// syntheticObject is an object of a held kind, named as fencegate's probes
// are, with the labels and annotations that name the parents the rules
// know (a Flux Kustomization, an Argo CD Application).
func syntheticObject(apiVersion, kind string, spec, status, extra map[string]any) map[string]any {
	obj := map[string]any{
		"apiVersion": apiVersion,
		"kind":       kind,
		"metadata": map[string]any{
			"name": "fencegate-probe", "namespace": "default", "generation": int64(2),
			"labels": map[string]any{
				"kustomize.toolkit.fluxcd.io/name": "fencegate-probe-parent", "kustomize.toolkit.fluxcd.io/namespace": "flux-system",
			},
			"annotations": map[string]any{
				"argocd.argoproj.io/tracking-id": "fencegate-probe-app:" + apiVersion + "/" + kind + ":default/fencegate-probe",
			},
		},
		"spec": spec,
	}
	if status != nil {
		obj["status"] = status
	}
	for k, v := range extra {
		obj[k] = v
	}
	return obj
}

// kindOf guesses a kind from a plural resource name: its singular,
// capitalized (widgets → Widget, policies → Policy, buses → Bus).
func kindOf(resource string) string {
	singular := resource
	switch {
	case strings.HasSuffix(resource, "ies"):
		singular = strings.TrimSuffix(resource, "ies") + "y"
	case strings.HasSuffix(resource, "sses"), strings.HasSuffix(resource, "ches"), strings.HasSuffix(resource, "shes"),
		strings.HasSuffix(resource, "xes"), strings.HasSuffix(resource, "uses"):
		singular = strings.TrimSuffix(resource, "es")
	case strings.HasSuffix(resource, "s") && !strings.HasSuffix(resource, "ss"):
		singular = strings.TrimSuffix(resource, "s")
	}
	if singular == "" {
		return resource
	}
	r := []rune(singular)
	r[0] = unicode.ToUpper(r[0])
	return string(r)
}

// holdProbesOf returns the synthetic hold probes and the recent hold
// inputs.
func (e *Engine) holdProbesOf() ([]holdProbe, error) {
	out := holdProbes(e.holdKinds)
	for _, h := range e.recentHolds.list() {
		dec := json.NewDecoder(bytes.NewReader(h.object))
		dec.UseNumber()
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			return nil, fmt.Errorf("decode a recent hold input: %w", err)
		}
		out = append(out, holdProbe{name: "a recently decided " + strings.TrimSpace(h.kind), domain: h.domain, object: obj})
	}
	return out, nil
}

// tryHold evaluates the hold decision of the snapshot's revision on the
// probes, as of now. The input's domain is the probe's, or else the
// state's own, so that the probe is released on the holder and held
// elsewhere, as the objects of the domain are.
func (s *snapshot) tryHold(ctx context.Context, probes []holdProbe, now time.Time) error {
	domain := s.fence.Domain
	if domain == "" {
		domain = "default"
	}
	for _, pr := range probes {
		d := pr.domain
		if d == "" {
			d = domain
		}
		if _, err := s.hold(ctx, d, pr.object, now); err != nil {
			return fmt.Errorf("the policies fail to decide the hold of %s while the fence is %s: %w", pr.name, s.fence.Status, err)
		}
	}
	return nil
}

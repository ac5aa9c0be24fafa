# What holds an actuator on a cluster that does not hold its fence. For each
# object of a watched kind (a Flux Kustomization, a CronJob, ...), the hold
# controller evaluates data.fencegate.hold.decision with input
#
#   {"object": <the object, as the API server returns it>, "domain": "<its fence domain>"}
#
# and that domain's fence state as data.fence (the engine keeps one snapshot
# per domain, as for the other entry points). The decision says which rule
# the object falls under, whether to hold it now, the fields holding sets,
# and whether the object has gone quiet: its flag is set and the actuator
# reports nothing still running.
#
# The hold controller (package hold) applies these decisions to the kinds
# of --hold-kinds. It records each field's prior value before it holds and
# restores exactly that on release, so the fields are the same whether hold
# is true or false: they are what releasing undoes too.
#
# Kinds are rules: one entry of `rules` per kind, keyed by a name of its
# own. An operator adds a kind with an entry in a file of their own in this
# package (see policies/README.md, "Holding actuators").
package fencegate.hold

import data.fencegate.ownership

decision := {
	"kind": kind,
	"hold": hold,
	"fields": fields,
	"quiet": quiet,
	"activity": activity,
	"parents": parent_list,
}

# ---------------------------------------------------------------------------
# The object, read defensively: anything that is not an object with a string
# apiVersion matches no rule, and so is of no held kind.

default obj := {}

obj := input.object if is_object(input.object)

# group is the object's API group: "batch" of "batch/v1", "" of the core
# "v1". Rules match the group and the kind, never the version, so that a new
# version of an actuator's API stays held.
group := parts[0] if {
	is_string(obj.apiVersion)
	parts := split(obj.apiVersion, "/")
	count(parts) == 2
}

group := "" if {
	is_string(obj.apiVersion)
	not contains(obj.apiVersion, "/")
}

name := object.get(obj, ["metadata", "name"], "")

namespace := object.get(obj, ["metadata", "namespace"], "")

# object_ref names the object in messages: namespace/name, or the name of a
# cluster-scoped object.
object_ref := sprintf("%s/%s", [namespace, name]) if namespace != ""

object_ref := name if namespace == ""

default labels := {}

labels := obj.metadata.labels if is_object(obj.metadata.labels)

default annotations := {}

annotations := obj.metadata.annotations if is_object(obj.metadata.annotations)

# conditions are the object's status conditions; only entries that are
# objects count.
conditions := [c | some c in list_at(["status", "conditions"]); is_object(c)]

# list_at(path) is the array at path, or [] where there is none (or
# something else is there).
list_at(path) := value if {
	value := object.get(obj, path, [])
	is_array(value)
} else := []

# condition_true(type) is true when the object reports the condition type
# with status "True".
condition_true(type) if {
	some c in conditions
	c.type == type
	c.status == "True"
}

# ---------------------------------------------------------------------------
# The rules. rules[name] is defined for the objects the rule holds (its body
# is the match) and is an object:
#
#   fields:   [{"path": [...], "value": <held value>}, ...]  what holding sets
#   activity: a set of strings, each something that still runs (empty when
#             nothing does)
#
# The value must be defined for every object the body matches: were it not,
# the entry would not exist and the object would be of no held kind, that
# is never held. So fields are constants (or rules with a default) and
# activity is a partial set or a comprehension, which are always defined.

# The names of the rules that match the object. Rules of different names
# that match the same object are all applied (see kind and fields), which is
# the safe side of an overlap: everything any of them holds is held.
matched := {rule | some rule, _ in rules}

# kind is the name of the rule that matched, "" for an object of no held
# kind; the names joined by "," if several matched.
default kind := ""

kind := concat(",", sort(matched)) if count(matched) > 0

# fields are what holding sets: every matching rule's, sorted.
fields := sort({f | some rule in matched; some f in rules[rule].fields})

# hold: only the cluster that holds the fence of the object's own domain
# lets its actuators act. Any other status, no fence state, or an input
# that names another domain than the state's (or none) holds: holding is
# the fail-closed side. (The hold controller also holds through the
# takeover grace, data.fence.resume_at_ns, by its own clock: a decision
# made at one instant cannot say when it stops holding.)
default hold := false

hold if {
	kind != ""
	not released
}

released if {
	ownership.holds
	input.domain == ownership.domain
}

# The fields not yet at their held value, as activity: an object whose flag
# is not set has not gone quiet, whatever its actuator reports.
activities contains sprintf("%s is not %s", [path_text(f.path), json.marshal(f.value)]) if {
	some f in fields
	object.get(obj, f.path, null) != f.value
}

activities contains msg if {
	some rule in matched
	some msg in rules[rule].activity
}

# quiet: the flag is set and nothing still runs. (An object of no held kind
# has nothing to wait for.)
quiet := count(activities) == 0

# activity says what still runs, for a person: "" when quiet.
default activity := ""

activity := sprintf("%s %s: %s", [object.get(obj, "kind", ""), object_ref, concat("; ", sort(activities))]) if {
	count(activities) > 0
}

# path_text renders a field path for people: spec.suspend,
# metadata.annotations["autoscaling.keda.sh/paused"].
path_text(path) := trim_prefix(concat("", [segment_text(s) | some s in path]), ".")

segment_text(s) := sprintf(".%s", [s]) if {
	is_string(s)
	regex.match(`^[A-Za-z_][A-Za-z0-9_]*$`, s)
} else := sprintf("[%s]", [json.marshal(s)])

# ---------------------------------------------------------------------------
# Parents: objects that could revert a hold, known from the object itself,
# as {"group", "kind", "name", "namespace"} ("" where the object does not
# say). A hold set on a child is undone by a parent that applies the child's
# declared state again (a Kustomization whose Git says suspend: false, an
# ApplicationSet regenerating its Applications); the parent is to be held
# first. Operators add sources of their own as more entries of
# this partial set.

# Applied by a Flux Kustomization or HelmRelease: Flux labels what it applies.
parents contains {
	"group": "kustomize.toolkit.fluxcd.io",
	"kind": "Kustomization",
	"name": labels["kustomize.toolkit.fluxcd.io/name"],
	"namespace": object.get(labels, "kustomize.toolkit.fluxcd.io/namespace", ""),
}

parents contains {
	"group": "helm.toolkit.fluxcd.io",
	"kind": "HelmRelease",
	"name": labels["helm.toolkit.fluxcd.io/name"],
	"namespace": object.get(labels, "helm.toolkit.fluxcd.io/namespace", ""),
}

# Generated by an ApplicationSet: it owns the Applications it generates
# (owner references are namespaced, so it is in the object's namespace).
parents contains {"group": "argoproj.io", "kind": "ApplicationSet", "name": ref.name, "namespace": namespace} if {
	some ref in list_at(["metadata", "ownerReferences"])
	ref.kind == "ApplicationSet"
	startswith(ref.apiVersion, "argoproj.io/")
}

# Synced by an Argo CD Application (annotation tracking, Argo CD's default
# since v3.0): "<app>:<group>/<kind>:<namespace>/<name>", where <app> is
# "<namespace>_<name>" for an Application outside Argo CD's own namespace
# and the bare name inside it (then its namespace is not known here: "").
parents contains {"group": "argoproj.io", "kind": "Application", "name": app_name, "namespace": app_namespace} if {
	id := annotations["argocd.argoproj.io/tracking-id"]
	is_string(id)
	app := split(id, ":")[0]
	app != ""
	parts := split(app, "_")
	app_name := parts[count(parts) - 1]
	app_namespace := concat("_", array.slice(parts, 0, count(parts) - 1))
}

# The parents the decision names: none for an object of no held kind, and
# never the object itself (Flux's own Kustomization labels itself).
default parent_list := []

parent_list := sort({p | some p in parents; not is_self(p)}) if kind != ""

is_self(p) if {
	p.group == group
	p.kind == obj.kind
	p.name == name
	p.namespace == namespace
}

# ---------------------------------------------------------------------------
# Flux: Kustomization and HelmRelease, held by spec.suspend. A suspended
# object is not reconciled again, but a reconciliation already running
# finishes (it may still apply; a HelmRelease's Helm upgrade in flight runs
# to its end, with its tests and remediation). Flux follows kstatus: a
# running reconciliation shows as Reconciling=True with reason Progressing
# and, from kustomize-controller when it starts and from helm-controller
# while it runs a Helm install or upgrade, Ready=Unknown with reason
# Progressing. A failed attempt leaves Reconciling=True with reason
# ProgressingWithRetry beside Ready=False, on a suspended object too
# (kustomize-controller v1.9's finalizeStatus keeps it; helm-controller's
# suspended reconcile returns before it touches the conditions), and its
# retry never comes while suspended: that alone is not activity.

rules["flux-kustomization"] := {
	"fields": [{"path": ["spec", "suspend"], "value": true}],
	"activity": flux_activity,
} if {
	group == "kustomize.toolkit.fluxcd.io"
	obj.kind == "Kustomization"
}

rules["flux-helmrelease"] := {
	"fields": [{"path": ["spec", "suspend"], "value": true}],
	"activity": flux_activity,
} if {
	group == "helm.toolkit.fluxcd.io"
	obj.kind == "HelmRelease"
}

flux_working contains c if {
	some c in conditions
	c.type == "Ready"
	c.status == "Unknown"
	c.reason == "Progressing"
}

flux_working contains c if {
	some c in conditions
	c.type == "Reconciling"
	c.status == "True"
	not flux_failed_attempt(c)
}

flux_failed_attempt(c) if {
	c.reason == "ProgressingWithRetry"
	some ready in conditions
	ready.type == "Ready"
	ready.status == "False"
}

flux_activity contains sprintf("still reconciling (%s)", [concat("; ", sort(described))]) if {
	described := {condition_text(c) | some c in flux_working}
	count(described) > 0
}

# A Ready object that has not observed its latest generation has not yet
# seen the hold (a suspended object's Ready=True reconcile records it), and
# may still start a reconciliation from what it saw before.
flux_activity contains sprintf("has not observed generation %d yet (observed %d)", [generation, observed]) if {
	condition_true("Ready")
	generation := obj.metadata.generation
	observed := obj.status.observedGeneration
	is_number(generation)
	is_number(observed)
	observed < generation
}

condition_text(c) := sprintf("%s=%s, %s: %s", [c.type, c.status, object.get(c, "reason", ""), c.message]) if {
	object.get(c, "message", "") != ""
} else := sprintf("%s=%s, %s", [c.type, c.status, object.get(c, "reason", "")])

# ---------------------------------------------------------------------------
# Argo CD Application, held by turning automated sync off with
# spec.syncPolicy.automated.enabled: false (Argo CD v3's SyncPolicyAutomated
# has Enabled *bool; IsAutomatedSyncEnabled is true when automated is set and
# enabled is unset or true). Not by removing automated: release would then
# rebuild the structure (prune, selfHeal, allowEmpty, ...) from a record,
# where this is one field set back to its prior value (usually absent), and
# selfHeal, which is part of automated, stops with it.
#
# An Application without automated does not sync by itself: there is nothing
# to hold, so it has no fields. Holding enabled: false there would create
# automated: {}, and a release that removed only enabled would leave
# automated: {}, which Argo CD reads as automated sync on.
#
# An Argo CD whose CRD lacks enabled (before v3) prunes the field: the flag
# never reads as set and the object never goes quiet, which says so.

rules["argocd-application"] := {
	"fields": argocd_fields,
	"activity": argocd_activity,
} if {
	group == "argoproj.io"
	obj.kind == "Application"
}

default argocd_fields := []

argocd_fields := [{"path": ["spec", "syncPolicy", "automated", "enabled"], "value": false}] if {
	is_object(obj.spec.syncPolicy.automated)
}

argocd_phase := object.get(obj, ["status", "operationState", "phase"], "")

# An operation runs (or is being terminated) ...
argocd_activity contains sprintf("an operation is %s%s", [lower(argocd_phase), argocd_message]) if {
	argocd_phase in {"Running", "Terminating"}
}

# ... or is requested and not started yet: operation is set until it
# completes, also for a sync a person asked for.
argocd_activity contains "an operation is requested and has not started" if {
	object.get(obj, "operation", null) != null
	not argocd_phase in {"Running", "Terminating"}
}

default argocd_message := ""

argocd_message := sprintf(": %s", [obj.status.operationState.message]) if {
	obj.status.operationState.message != ""
}

# ---------------------------------------------------------------------------
# Crossplane managed resources, held by spec.managementPolicies: ["Observe"]:
# the provider only observes the external resource, never creates, updates
# or deletes it, so a delete on a fenced cluster removes only the local
# object. (This needs the provider's management policies feature, on by
# default in most providers; a provider that has it off refuses to reconcile
# an object whose policies are not the default, "the feature is not
# enabled", which stops it too.)
#
# Managed resources have no group or kind in common, so the match is their
# shape: a spec.forProvider object (the crossplane-runtime convention every
# provider follows) or a spec.managementPolicies array (the CRDs default it
# to ["*"]). The crossplane.io/external-name annotation is not required: a
# managed resource that has not been created yet (or was restored without
# it) may not carry it, and it is exactly the one whose provider would
# create the cloud resource a second time. Matching too much is the visible
# side: an object of another project whose CRD has no managementPolicies
# prunes the field, never reads as held and never goes quiet.

rules["crossplane-managed"] := {
	"fields": [{"path": ["spec", "managementPolicies"], "value": ["Observe"]}],
	"activity": crossplane_activity,
} if {
	group != ""
	crossplane_managed
}

crossplane_managed if is_object(obj.spec.forProvider)

crossplane_managed if is_array(obj.spec.managementPolicies)

# Terraform-based (upjet) providers run create, update and delete
# asynchronously and report it as AsyncOperation with reason Ongoing.
crossplane_activity contains "an asynchronous provider operation is ongoing" if {
	some c in conditions
	c.type == "AsyncOperation"
	c.reason == "Ongoing"
}

# A provider that records the generation it synced (crossplane-runtime
# conditions carry observedGeneration) and has not synced the latest has not
# applied the hold yet.
crossplane_activity contains sprintf("the provider has not synced generation %d yet (synced %d)", [generation, observed]) if {
	some c in conditions
	c.type == "Synced"
	generation := obj.metadata.generation
	observed := c.observedGeneration
	is_number(generation)
	is_number(observed)
	observed < generation
}

# ---------------------------------------------------------------------------
# Kubernetes CronJob, held by spec.suspend: no new Job starts; Jobs already
# started run to their end and are listed in status.active.

rules["cronjob"] := {
	"fields": [{"path": ["spec", "suspend"], "value": true}],
	"activity": cronjob_activity,
} if {
	group == "batch"
	obj.kind == "CronJob"
}

cronjob_activity contains sprintf("%d %s still running", [n, plural(n, "Job")]) if {
	n := count(list_at(["status", "active"]))
	n > 0
}

plural(n, word) := word if n == 1

plural(n, word) := sprintf("%ss", [word]) if n != 1

# ---------------------------------------------------------------------------
# KEDA ScaledObject and ScaledJob, held by the annotation
# autoscaling.keda.sh/paused: "true": KEDA stops scaling (a ScaledObject
# keeps its current replicas, a ScaledJob starts no new Jobs) and reports
# Paused=True. A KEDA that does not report it has not paused the object as
# far as anyone can tell.

rules["keda-scaledobject"] := {
	"fields": [{"path": ["metadata", "annotations", "autoscaling.keda.sh/paused"], "value": "true"}],
	"activity": keda_activity,
} if {
	group == "keda.sh"
	obj.kind == "ScaledObject"
}

rules["keda-scaledjob"] := {
	"fields": [{"path": ["metadata", "annotations", "autoscaling.keda.sh/paused"], "value": "true"}],
	"activity": keda_activity,
} if {
	group == "keda.sh"
	obj.kind == "ScaledJob"
}

keda_activity contains "KEDA does not report it paused (no Paused=True condition)" if {
	not condition_true("Paused")
}

# ---------------------------------------------------------------------------
# Velero Schedule, held by spec.paused: no new Backup is started. A Backup
# it started before runs on; the Schedule does not show it (its Backups carry
# the label velero.io/schedule-name), so the flag is all its quiet says.

rules["velero-schedule"] := {
	"fields": [{"path": ["spec", "paused"], "value": true}],
	"activity": set(),
} if {
	group == "velero.io"
	obj.kind == "Schedule"
}

# ---------------------------------------------------------------------------
# Argo Workflows CronWorkflow, held by spec.suspend: no new Workflow starts;
# the ones already started are listed in status.active.

rules["argo-cronworkflow"] := {
	"fields": [{"path": ["spec", "suspend"], "value": true}],
	"activity": cronworkflow_activity,
} if {
	group == "argoproj.io"
	obj.kind == "CronWorkflow"
}

cronworkflow_activity contains sprintf("%d %s still running", [n, plural(n, "Workflow")]) if {
	n := count(list_at(["status", "active"]))
	n > 0
}

# Admission of Component changes (and of the other fenced kinds the
# configuration names, settings.fenced_kinds): the webhook evaluates
# data.fencegate.admission.decision for every AdmissionReview it receives
# (input is the AdmissionReview, so the request is input.request).
#
# Only the cluster that holds the ownership fence may create or update
# Components. Elsewhere a create or update is denied (enforcement "deny"),
# admitted with a warning ("warn") or admitted and only logged ("dryrun").
# Deletes are always admitted (a fenced cluster must be able to clean up),
# as are status updates by fencegate's own controller and requests by exempt
# users, groups and namespaces.
#
# The mutating endpoint applies the patch: while this cluster holds the fence
# it stamps the epoch and the fencing token on the Component; a change
# admitted while it does not hold the fence is marked as such instead.
#
# A note on style: the engine partially evaluates these rules against the
# fence state and the config whenever either changes, so that a request only
# evaluates what depends on it. Rules that walk the configured names first
# and then compare them with the request, and sets instead of comprehensions,
# keep what is left for each request small. Any valid Rego works; it may
# just be slower.
package fencegate.admission

import data.fencegate.ownership
import data.fencegate.settings

# The decision the webhook reads. Both endpoints use allowed, reasons and
# warnings; the mutating endpoint adds the patch to what it allows.
# violations lists what enforcement "warn" or "dryrun" let through, for the
# decision log.
decision := {
	"allowed": allowed,
	"reason": reason,
	"reasons": reasons,
	"warnings": sort(warnings),
	"patch": sort(patch),
	"violations": violations,
}

# ---------------------------------------------------------------------------
# What is being asked.

# Components are fenced, and so are the kinds the configuration names
# (settings.fenced_kinds); anything else the webhook may be sent is
# admitted untouched.
component if {
	input.request.kind.group == "components.fencegate.dev"
	input.request.kind.kind == "Component"
}

fenced_kind if component

fenced_kind if {
	some k in settings.fenced_kinds
	input.request.kind.group == k.group
	input.request.kind.kind == k.kind
}

creates_or_updates if {
	fenced_kind
	input.request.operation in {"CREATE", "UPDATE"}
}

deletes if {
	fenced_kind
	input.request.operation == "DELETE"
}

# fencegate's hold controller holding or releasing an actuator's object
# (field manager fencegate-hold, as fencegate's service account): always
# admitted, and neither stamped nor marked, so that a release restores the
# object exactly. Never a Component: the hold controller holds actuators,
# and a Component changes only where the fence is held.
hold_patch if {
	not component
	input.request.operation == "UPDATE"
	input.request.options.fieldManager == "fencegate-hold"
	some user in settings.controller_users
	input.request.userInfo.username == user
}

status_update if input.request.subResource == "status"

# A status update by fencegate's own controller: always admitted, so that it
# can record why a Component is held.
controller_status_update if {
	status_update
	some user in settings.controller_users
	input.request.userInfo.username == user
}

# Why a request is exempt (break-glass), if it is.
exemptions contains sprintf("user %q is exempt", [user]) if {
	some user in settings.exempt_users
	input.request.userInfo.username == user
}

exemptions contains sprintf("group %q is exempt", [group]) if {
	some group in settings.exempt_groups
	group in input.request.userInfo.groups
}

exemptions contains sprintf("namespace %q is exempt", [namespace]) if {
	some namespace in settings.exempt_namespaces
	input.request.namespace == namespace
}

exempt if {
	some _ in exemptions
}

# An update of a Component being deleted that adds no finalizer: the local
# teardown a delete starts (an actuator removing its finalizer once it tore
# down this cluster's copy), admitted as the delete itself is. (Its spec is
# not compared: a Component being deleted acts no more, and a decision
# keyed on specs would be remembered once per spec.)
finalizing if {
	fenced_kind
	input.request.operation == "UPDATE"
	object.get(input.request.oldObject, ["metadata", "deletionTimestamp"], null) != null
	old_finalizers := object.get(input.request.oldObject, ["metadata", "finalizers"], [])
	every f in object.get(input.request.object, ["metadata", "finalizers"], []) {
		f in old_finalizers
	}
}

# ---------------------------------------------------------------------------
# The fence rule.

# A create or update that this cluster may not make on its own: it does not
# hold the fence (fencegate's controller may still write status, and a
# deleted Component's finalizers may go).
not_permitted if {
	creates_or_updates
	not ownership.holds
	not controller_status_update
	not finalizing
	not hold_patch
}

# ... and nothing exempts it.
violates if {
	not_permitted
	not exempt
}

violates if stale_write

# ---------------------------------------------------------------------------
# Write tokens: a write decided by a gated controller asserts the fencing
# token its reconcile began under (package gate). The API server is the
# store that checks fencing tokens: a write decided under an older token
# than the fence's current one comes from an earlier hold (of this cluster
# or another) and is refused, even on the holder. A write without the
# assertion (a person's, a kubectl edit that sends back the stored
# fencegate.dev/token) is never refused for its token. The mutation removes
# the assertion, so it is never stored.
#
# Only what the request changes asserts: the annotation in a CREATE, and in
# an UPDATE a value that the old object does not have (absent there, or
# different). An annotation stored earlier (by a write no webhook saw: a
# kind not fenced then, an excluded namespace, a restored backup) and sent
# back unchanged is no assertion of this request: were it one, every later
# update would be refused once the fence's token passed it, and the object
# could never change again. fencegate's hold patches assert nothing, so that
# an actuator's object can always be held and released.

write_token_annotation := "fencegate.dev/write-token"

# The annotation's value in the object and in the old object (null where
# there is none). (The key is spelled out, not write_token_annotation, so
# that the engine's decision cache keys on this annotation alone, not on
# all of them.)
object_write_token := object.get(input.request.object, ["metadata", "annotations", "fencegate.dev/write-token"], null)

default old_write_token := null

old_write_token := object.get(input.request.oldObject, ["metadata", "annotations", "fencegate.dev/write-token"], null) if {
	is_object(input.request.oldObject)
}

# changes_write_token: the request sets the annotation's value.
changes_write_token if input.request.operation == "CREATE"

changes_write_token if {
	input.request.operation == "UPDATE"
	object_write_token != old_write_token
}

# The token the request asserts; null or undefined when it asserts none.
asserted_write_token := object_write_token if {
	creates_or_updates
	changes_write_token
	not hold_patch
}

# A stale assertion: a token below the fence's current one.
stale_write if {
	regex.match(`^[0-9]{1,19}$`, asserted_write_token)
	to_number(asserted_write_token) < ownership.token
}

# An assertion that is no token at all is refused as such: it cannot be
# checked.
malformed_write_token if {
	is_string(asserted_write_token)
	not regex.match(`^[0-9]{1,19}$`, asserted_write_token)
}

malformed_write_token if {
	asserted_write_token != null
	not is_string(asserted_write_token)
}

stale_denial := sprintf(
	concat(" ", [
		"fencegate: STALE_FENCING_TOKEN: this write was decided under fencing token %s (annotation %s),",
		"but the fence of domain %q is now at token %d (%s): it comes from an earlier hold and is refused.",
		"The writer reads the object again and decides under the current token.",
	]),
	[asserted_write_token, write_token_annotation, ownership.domain, ownership.token, ownership.holder_clause],
)

malformed_denial := sprintf(
	"fencegate: annotation %s is %s: want the fencing token (a decimal number) the write was decided under, or no annotation",
	[write_token_annotation, json.marshal(asserted_write_token)],
)

# The denial message: where this cluster stands and what to do, and for a
# kind other than Component, that it is fenced as Components are. (It names
# the kind, not the object: the engine remembers decisions by what they
# read, and the object's name would make every object a decision of its
# own.)
denial := concat("", ["fencegate: ", kind_clause, ownership.explanation])

default kind_clause := ""

kind_clause := sprintf("%s is a kind fenced like Components here (admission.kinds). ", [input.request.kind.kind]) if not component

default allowed := true

allowed := false if {
	violates
	settings.enforcement == "deny"
}

allowed := false if malformed_write_token

# The fence denial, and the write token's where it is stale or malformed.
denials contains denial if {
	not_permitted
	not exempt
}

denials contains stale_denial if stale_write
denials contains malformed_denial if malformed_write_token

# reason is the denial's machine-readable reason, which the webhook gives
# the API server as the status reason: STALE_FENCING_TOKEN for a stale
# write token alone.
default reason := ""

reason := "STALE_FENCING_TOKEN" if {
	stale_write
	not not_permitted
}

default reasons := []

reasons := sort(denials) if {
	violates
	settings.enforcement == "deny"
}

reasons := [malformed_denial] if {
	malformed_write_token
	not violates
}

default violations := []

violations := sort(denials) if {
	violates
	settings.enforcement != "deny"
}

# ---------------------------------------------------------------------------
# Warnings: kubectl prints them to whoever made the request.

warnings contains concat("", ["fencegate: admitted only because enforcement is \"warn\": ", ownership.explanation]) if {
	violates
	settings.enforcement == "warn"
}

warnings contains concat("", ["fencegate: admitted only because enforcement is \"warn\": ", trim_prefix(stale_denial, "fencegate: ")]) if {
	stale_write
	settings.enforcement == "warn"
}

warnings contains sprintf("fencegate: admitted because %s: %s", [concat(" and ", sort(exemptions)), ownership.explanation]) if {
	not_permitted
	exempt
}

warnings contains sprintf(
	concat(" ", [
		"fencegate: this delete removes the Component from %s only, which does not hold the ownership fence",
		"of domain %q (%s); the Component on the cluster that holds the fence is not affected.",
	]),
	[ownership.this_cluster, ownership.domain, ownership.holder_clause],
) if {
	deletes
	not ownership.holds
}

# ---------------------------------------------------------------------------
# Mutation: stamp or mark the Component's annotations. The patch only adds
# or replaces fencegate.dev/ annotations and removes stale fencegate.dev/
# marks; nothing else of the object is touched.

epoch_annotation := "fencegate.dev/epoch"

token_annotation := "fencegate.dev/token"

fenced_annotation := "fencegate.dev/fenced"

fenced_by_annotation := "fencegate.dev/fenced-by"

# The annotations an admitted create or update gets. While this cluster holds
# the fence: the epoch it holds the fence at and the fencing token, which an
# actuator compares with the current token before acting. Otherwise
# (admitted by warn, dryrun or an exemption): a mark naming the holder, so
# that actuators and auditors can tell that the change did not come through
# the holder.
stamps := {
	epoch_annotation: sprintf("%d", [ownership.cluster_epoch]),
	token_annotation: sprintf("%d", [ownership.token]),
} if {
	ownership.holds
}

stamps := {
	fenced_annotation: "true",
	fenced_by_annotation: ownership.holder,
} if {
	not ownership.holds
}

# Admitted creates and updates of a Component itself (not its status) are
# stamped.
stamped if {
	creates_or_updates
	not status_update
	not hold_patch
	allowed
}

has_annotations if is_object(input.request.object.metadata.annotations)

# Without an annotations map, one operation adds the whole map.
patch contains {"op": "add", "path": "/metadata/annotations", "value": stamps} if {
	stamped
	not has_annotations
}

# With one, an operation per annotation whose value changes ("add" replaces
# an existing member).
patch contains {"op": "add", "path": annotation_path(key), "value": value} if {
	stamped
	has_annotations
	some key, value in stamps
	object.get(input.request.object.metadata.annotations, key, null) != value
}

# A mark left by an earlier admission while this cluster did not hold the
# fence no longer describes a Component that the holder has now admitted.
patch contains {"op": "remove", "path": annotation_path(key)} if {
	stamped
	ownership.holds
	has_annotations
	some key in [fenced_annotation, fenced_by_annotation]
	object.get(input.request.object.metadata.annotations, key, null) != null
}

# The write token is an assertion of the request, never stored: an
# asserted one is removed, and so is one stored before, by the first change
# of the object that is admitted here (but a hold patch, which changes the
# held fields alone, and a status update, whose metadata the API server
# does not take).
patch contains {"op": "remove", "path": annotation_path(write_token_annotation)} if {
	allowed
	carries_write_token
}

carries_write_token if asserted_write_token != null

carries_write_token if {
	creates_or_updates
	not hold_patch
	not status_update
	object_write_token != null
}

# JSONPatch paths are JSON pointers: "~" and "/" in a key are escaped.
annotation_path(key) := concat("/", ["", "metadata", "annotations", strings.replace_n({"~": "~0", "/": "~1"}, key)])

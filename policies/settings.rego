# Operator settings, read from data.fencegate.config (the Helm chart's values
# or the files given to --config), with the defaults that apply when a setting
# is missing: enforcement "deny" and nobody exempt.
#
# data.fencegate.config is one flat object:
#
#   enforcement:       "deny" | "warn" | "dryrun"
#   exempt_users:      [user name, ...]
#   exempt_groups:     [group name, ...]
#   exempt_namespaces: [namespace, ...]
#   controller_users:  ["system:serviceaccount:<namespace>:<name>", ...]
#   fenced_kinds:      [{"group": "batch", "kind": "CronJob"}, ...]
package fencegate.settings

# enforcement decides what happens to a change this cluster may not make:
# "deny" refuses it, "warn" admits it with a warning, "dryrun" admits it
# silently and only records it in the decision log. An unknown value counts
# as "deny": a typo must not open the gate.
default enforcement := "deny"

enforcement := data.fencegate.config.enforcement if data.fencegate.config.enforcement in {"warn", "dryrun"}

# Break-glass exemptions: requests by these users, by members of these groups
# or in these namespaces are admitted even when this cluster does not hold
# the fence, with a warning that says so.
exempt_users := {user | some user in data.fencegate.config.exempt_users}

exempt_groups := {group | some group in data.fencegate.config.exempt_groups}

exempt_namespaces := {ns | some ns in data.fencegate.config.exempt_namespaces}

# The users fencegate's own controller runs as (its service account). Their
# updates of the status subresource are always admitted, so that the
# controller can report why a Component is held.
controller_users := {user | some user in data.fencegate.config.controller_users}

# The kinds whose creates and updates are fenced as Components' are, beside
# Components themselves (the chart's admission.kinds, whose webhook rules
# send them here): {"group", "kind"} pairs; the core group is "".
fenced_kinds := {{"group": object.get(k, "group", ""), "kind": k.kind} |
	some k in data.fencegate.config.fenced_kinds
	is_string(k.kind)
}

# What data.fence says about this cluster's ownership of the fence, in the
# words the other policies use: the status, who holds the fence, and an
# explanation per status that tells a person what is going on and what to do.
package fencegate.ownership

# The fence state the agent wrote; empty until it wrote one.
default fence := {}

fence := data.fence

# status is this cluster's standing: active, fenced, epoch_regressed,
# acquiring, unknown or unsupported. The engine never shows the policies an
# "active" state whose validity (valid_until_ns) has passed: it presents it
# as "unknown", with a message that says so.
default status := "unknown"

status := fence.status

# holds is true while this cluster holds the fence: only then may Components
# change and be acted on here.
holds if status == "active"

domain := object.get(fence, "domain", "default")

cluster_name := object.get(fence, ["cluster", "name"], "")

cluster_epoch := object.get(fence, ["cluster", "epoch"], 0)

holder_name := object.get(fence, ["holder", "name"], "")

holder_epoch := object.get(fence, ["holder", "epoch"], 0)

token := object.get(fence, "token", 0)

# holder is the holder as "<name>@<epoch>" (the form of the fenced-by
# annotation), or "unknown" when no holder is known.
default holder := "unknown"

holder := sprintf("%s@%d", [holder_name, holder_epoch]) if holder_name != ""

# Phrases the explanations are made of.
default this_cluster := "this cluster"

this_cluster := sprintf("cluster %q", [cluster_name]) if cluster_name != ""

default short_name := "this cluster"

short_name := cluster_name if cluster_name != ""

# failover_to names this cluster to `fencegate failover --to`, which takes
# the cluster's kubeconfig context: the cluster's name (what contexts are
# usually called), or a placeholder while the name is unknown.
default failover_to := "<its kubeconfig context>"

failover_to := cluster_name if cluster_name != ""

# failover_args are the arguments of `fencegate failover` that move this
# domain's fence to this cluster: --domain only where it is not the
# default, which the command picks when it is not given.
failover_args := sprintf("--to %s", [failover_to]) if domain == "default"

failover_args := sprintf("--domain %s --to %s", [domain, failover_to]) if domain != "default"

default holder_clause := "no holder is known"

holder_clause := sprintf("cluster %q holds it at epoch %d", [holder_name, holder_epoch]) if holder_name != ""

# The agent's own words about the state, appended where they help.
default detail := ""

detail := sprintf(" (%s)", [fence.message]) if fence.message != ""

# explanation tells a person, for each status, where this cluster stands and
# what to do about it.
explanation := sprintf(
	"%s holds the ownership fence of domain %q at epoch %d (fencing token %d).",
	[this_cluster, domain, cluster_epoch, token],
) if {
	status == "active"
}

explanation := sprintf(
	concat(" ", [
		"%s (epoch %d) does not hold the ownership fence of domain %q: %s.",
		"Components can only change on the cluster that holds the fence.",
		"To fail over to %s, run fencegate failover %s, or raise spec.epoch of the Fence %q on %s above %d (to %d).",
	]),
	[this_cluster, cluster_epoch, domain, holder_clause, short_name, failover_args, domain, short_name, holder_epoch, holder_epoch + 1],
) if {
	status == "fenced"
	not handing_over
}

# handing_over is true while this cluster, still named holder, is fenced
# because a cluster with a higher epoch takes the fence over: the agent
# learns the new holder's name only from a later answer.
handing_over if {
	status == "fenced"
	cluster_uid := object.get(fence, ["cluster", "uid"], "")
	cluster_uid != ""
	object.get(fence, ["holder", "uid"], "") == cluster_uid
}

explanation := sprintf(
	concat(" ", [
		"%s (epoch %d) no longer holds the ownership fence of domain %q: a cluster with a higher epoch",
		"is taking it over. Components can only change on the cluster that holds the fence.",
		"To keep the fence here, raise spec.epoch of the Fence %q on %s above the new holder's epoch",
		"(fencegate failover %s --epoch N).",
	]),
	[this_cluster, cluster_epoch, domain, domain, short_name, failover_args],
) if {
	handing_over
}

explanation := sprintf(
	concat(" ", [
		"%s declares epoch %d, lower than an epoch it declared before, so the fence authority refuses it",
		"(a cluster restored from a backup, or an epoch lowered by mistake).",
		"The ownership fence of domain %q is held elsewhere: %s.",
		"Raise spec.epoch of the Fence %q on %s back to at least the highest epoch it declared;",
		"to take the fence over it must also be above %d",
		"(fencegate failover %s --epoch N, with N above %d and at least that epoch).",
	]),
	[this_cluster, cluster_epoch, domain, holder_clause, domain, short_name, holder_epoch, failover_args, holder_epoch],
) if {
	status == "epoch_regressed"
}

explanation := sprintf(
	concat(" ", [
		"%s (epoch %d) is taking over the ownership fence of domain %q and waits for the lease of the",
		"previous holder to end (%s). Components can change here once the takeover completes,",
		"within one lease TTL; retry shortly.",
	]),
	[this_cluster, cluster_epoch, domain, holder_clause],
) if {
	status == "acquiring"
}

explanation := sprintf(
	concat(" ", [
		"%s (epoch %d) cannot confirm that it holds the ownership fence of domain %q%s; the last known holder:",
		"%s. Components cannot change until the fence authority confirms the fence; check the fencegate",
		"agent's logs and its connection to the fence authority.",
	]),
	[this_cluster, cluster_epoch, domain, unknown_detail, holder_clause],
) if {
	status == "unknown"
}

explanation := sprintf(
	concat(" ", [
		"the fence authority of %s does not implement the fence protocol (fencegate.fence.v1.FenceService),",
		"so %s (epoch %d) cannot hold the ownership fence of domain %q%s. Components cannot change until",
		"fencegate is pointed at a fence authority that serves it.",
	]),
	[this_cluster, this_cluster, cluster_epoch, domain, detail],
) if {
	status == "unsupported"
}

explanation := sprintf(
	concat(" ", [
		"%s (epoch %d) reports the fence status %q, which these policies do not know, so it cannot",
		"confirm that it holds the ownership fence of domain %q. Components cannot change until the",
		"status is one of active, fenced, epoch_regressed, acquiring, unknown or unsupported.",
	]),
	[this_cluster, cluster_epoch, status, domain],
) if {
	not status in {"active", "fenced", "epoch_regressed", "acquiring", "unknown", "unsupported"}
}

# Why the status is unknown, as far as the state tells.
default unknown_detail := ""

unknown_detail := " (no fence state has been written yet)" if fence == {}

unknown_detail := detail if fence != {}

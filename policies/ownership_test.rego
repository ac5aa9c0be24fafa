package fencegate.ownership_test

import data.fencegate.ownership

east := {"name": "east", "uid": "east-uid", "epoch": 7}

west := {"name": "west", "uid": "west-uid", "epoch": 3}

state(status, cluster, holder) := {
	"status": status,
	"domain": "default",
	"cluster": cluster,
	"holder": holder,
	"token": 1042,
	"valid_until_ns": 0,
	"last_success_ns": 0,
	"reason": "",
	"message": "",
}

test_status_is_unknown_without_a_fence_state if {
	ownership.status == "unknown"
	not ownership.holds
}

test_status_is_the_fence_status if {
	every status in ["active", "fenced", "epoch_regressed", "acquiring", "unknown", "unsupported"] {
		ownership.status == status with data.fence as state(status, west, east)
	}
}

test_holds_only_while_active if {
	ownership.holds with data.fence as state("active", east, east)
	every status in ["fenced", "epoch_regressed", "acquiring", "unknown", "unsupported", "bogus"] {
		not ownership.holds with data.fence as state(status, west, east)
	}
}

test_holder_names_the_holder_and_its_epoch if {
	ownership.holder == "east@7" with data.fence as state("fenced", west, east)
	ownership.holder == "unknown" with data.fence as state("unknown", west, {"name": "", "uid": "", "epoch": 0})
}

test_defaults_without_a_fence_state if {
	ownership.domain == "default"
	ownership.this_cluster == "this cluster"
	ownership.holder_clause == "no holder is known"
	ownership.token == 0
}

test_explanation_active if {
	ownership.explanation == `cluster "east" holds the ownership fence of domain "default" at epoch 7 (fencing token 1042).` with data.fence as state("active", east, east)
}

test_explanation_fenced if {
	ownership.explanation == concat(" ", [
		`cluster "west" (epoch 3) does not hold the ownership fence of domain "default": cluster "east" holds it at epoch 7.`,
		"Components can only change on the cluster that holds the fence.",
		`To fail over to west, run fencegate failover --to west, or raise spec.epoch of the Fence "default" on west above 7 (to 8).`,
	]) with data.fence as state("fenced", west, east)
}

test_explanation_epoch_regressed if {
	msg := ownership.explanation with data.fence as state("epoch_regressed", west, east)
	startswith(msg, `cluster "west" declares epoch 3, lower than an epoch it declared before`)
	contains(msg, `cluster "east" holds it at epoch 7`)
	contains(msg, `Raise spec.epoch of the Fence "default" on west back to at least the highest epoch it declared;`)
	contains(msg, "to take the fence over it must also be above 7")
	endswith(msg, "(fencegate failover --to west --epoch N, with N above 7 and at least that epoch).")
	not contains(msg, "helm upgrade")
}

test_explanation_acquiring if {
	msg := ownership.explanation with data.fence as state("acquiring", {"name": "west", "uid": "west-uid", "epoch": 8}, east)
	startswith(msg, `cluster "west" (epoch 8) is taking over the ownership fence of domain "default"`)
	contains(msg, `cluster "east" holds it at epoch 7`)
	contains(msg, "retry shortly")
}

test_explanation_unknown if {
	fence := object.union(state("unknown", west, east), {"reason": "LEASE_EXPIRED", "message": "the lease expired"})
	msg := ownership.explanation with data.fence as fence
	startswith(msg, `cluster "west" (epoch 3) cannot confirm that it holds the ownership fence of domain "default" (the lease expired)`)
	contains(msg, `the last known holder: cluster "east" holds it at epoch 7`)
	contains(msg, "connection to the fence authority")
}

test_explanation_unknown_without_a_fence_state if {
	startswith(ownership.explanation, `this cluster (epoch 0) cannot confirm that it holds the ownership fence of domain "default" (no fence state has been written yet)`)
}

test_explanation_unsupported if {
	msg := ownership.explanation with data.fence as state("unsupported", west, {"name": "", "uid": "", "epoch": 0})
	startswith(msg, `the fence authority of cluster "west" does not implement the fence protocol`)
	contains(msg, "fencegate.fence.v1.FenceService")
}

test_explanation_of_a_status_the_policies_do_not_know if {
	msg := ownership.explanation with data.fence as state("bogus", west, east)
	contains(msg, `reports the fence status "bogus", which these policies do not know`)
}

test_short_name_without_a_cluster_name if {
	msg := ownership.explanation with data.fence as state("fenced", {"name": "", "uid": "", "epoch": 0}, east)
	contains(msg, `To fail over to this cluster, run fencegate failover --to <its kubeconfig context>, or raise spec.epoch of the Fence "default" on this cluster above 7 (to 8).`)
}

test_short_name_without_a_cluster_name_epoch_regressed if {
	msg := ownership.explanation with data.fence as state("epoch_regressed", {"name": "", "uid": "", "epoch": 0}, east)
	contains(msg, `Raise spec.epoch of the Fence "default" on this cluster back to at least`)
	contains(msg, "fencegate failover --to <its kubeconfig context> --epoch N")
}

test_no_explanation_tells_to_fail_over_by_helm if {
	every status in ["active", "fenced", "epoch_regressed", "acquiring", "unknown", "unsupported", "bogus"] {
		not contains(ownership.explanation, "helm") with data.fence as state(status, west, east)
	}
}

test_failover_names_the_domains_fence if {
	fence := object.union(state("fenced", west, east), {"domain": "payments"})
	msg := ownership.explanation with data.fence as fence
	contains(msg, `To fail over to west, run fencegate failover --domain payments --to west, or raise spec.epoch of the Fence "payments" on west above 7 (to 8).`)
}

test_failover_names_the_domain_of_a_regressed_epoch if {
	fence := object.union(state("epoch_regressed", west, east), {"domain": "payments"})
	msg := ownership.explanation with data.fence as fence
	contains(msg, "(fencegate failover --domain payments --to west --epoch N, with N above 7 and at least that epoch).")
}

test_explanation_unknown_without_an_agent_message if {
	msg := ownership.explanation with data.fence as state("unknown", west, east)
	startswith(msg, `cluster "west" (epoch 3) cannot confirm that it holds the ownership fence of domain "default"; the last known holder`)
}

test_a_holder_handing_over_is_not_told_it_holds_the_fence if {
	msg := ownership.explanation with data.fence as state("fenced", east, east)
	startswith(msg, `cluster "east" (epoch 7) no longer holds the ownership fence of domain "default": a cluster with a higher epoch is taking it over.`)
	not contains(msg, `cluster "east" holds it`)
	contains(msg, "fencegate failover --to east --epoch N")
}

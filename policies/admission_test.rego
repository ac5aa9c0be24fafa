package fencegate.admission_test

import data.fencegate.admission
import data.fencegate.ownership

# ---------------------------------------------------------------------------
# Fixtures.

east := {"name": "east", "uid": "east-uid", "epoch": 7}

west := {"name": "west", "uid": "west-uid", "epoch": 3}

active := {"status": "active", "domain": "default", "cluster": east, "holder": east, "token": 1042}

fence(status) := {"status": status, "domain": "default", "cluster": west, "holder": east, "token": 1042}

not_holding := ["fenced", "epoch_regressed", "acquiring", "unknown", "unsupported"]

config := {"controller_users": ["system:serviceaccount:fencegate:fencegate"]}

component(annotations) := {
	"apiVersion": "components.fencegate.dev/v1alpha1",
	"kind": "Component",
	"metadata": object.union({"name": "billing", "namespace": "default"}, annotations),
	"spec": {"enabled": true},
}

plain := component({})

annotated(annotations) := component({"annotations": annotations})

# request builds an AdmissionReview; fields overrides parts of the request.
request(operation, fields) := {
	"apiVersion": "admission.k8s.io/v1",
	"kind": "AdmissionReview",
	"request": object.union(
		{
			"uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
			"kind": {"group": "components.fencegate.dev", "version": "v1alpha1", "kind": "Component"},
			"resource": {"group": "components.fencegate.dev", "version": "v1alpha1", "resource": "components"},
			"name": "billing",
			"namespace": "default",
			"operation": operation,
			"userInfo": {"username": "alice", "groups": ["developers", "system:authenticated"]},
			"object": plain,
			"oldObject": plain,
			"dryRun": false,
		},
		fields,
	),
}

decide(req, state, settings) := d if {
	d := admission.decision with input as req with data.fence as state with data.fencegate.config as settings
}

explanation(state) := e if {
	e := ownership.explanation with data.fence as state
}

message(state) := concat("", ["fencegate: ", explanation(state)])

# ---------------------------------------------------------------------------
# The decision's shape.

test_decision_has_every_field if {
	d := decide(request("CREATE", {}), active, config)
	object.keys(d) == {"allowed", "reason", "reasons", "warnings", "patch", "violations"}
}

# ---------------------------------------------------------------------------
# This cluster holds the fence.

test_active_admits_creates_and_updates_without_warnings if {
	every operation in ["CREATE", "UPDATE"] {
		d := decide(request(operation, {}), active, config)
		d.allowed
		d.reasons == []
		d.warnings == []
		d.violations == []
	}
}

test_active_adds_the_annotations_map_when_there_is_none if {
	d := decide(request("CREATE", {}), active, config)
	d.patch == [{"op": "add", "path": "/metadata/annotations", "value": {"fencegate.dev/epoch": "7", "fencegate.dev/token": "1042"}}]
}

test_active_adds_each_stamp_that_changes_and_keeps_user_annotations if {
	obj := annotated({"team": "payments", "fencegate.dev/epoch": "7", "fencegate.dev/token": "1041"})
	d := decide(request("UPDATE", {"object": obj}), active, config)
	d.patch == [{"op": "add", "path": "/metadata/annotations/fencegate.dev~1token", "value": "1042"}]
}

test_active_patches_nothing_when_the_stamps_are_current if {
	obj := annotated({"fencegate.dev/epoch": "7", "fencegate.dev/token": "1042"})
	d := decide(request("UPDATE", {"object": obj}), active, config)
	d.patch == []
}

test_active_removes_stale_fence_marks if {
	obj := annotated({"fencegate.dev/fenced": "true", "fencegate.dev/fenced-by": "west@3", "team": "payments"})
	d := decide(request("UPDATE", {"object": obj}), active, config)
	d.patch == [
		{"op": "add", "path": "/metadata/annotations/fencegate.dev~1epoch", "value": "7"},
		{"op": "add", "path": "/metadata/annotations/fencegate.dev~1token", "value": "1042"},
		{"op": "remove", "path": "/metadata/annotations/fencegate.dev~1fenced"},
		{"op": "remove", "path": "/metadata/annotations/fencegate.dev~1fenced-by"},
	]
}

test_active_never_patches_status_updates_or_deletes if {
	decide(request("UPDATE", {"subResource": "status"}), active, config).patch == []
	decide(request("DELETE", {"object": null}), active, config).patch == []
}

test_active_admits_deletes_without_warnings if {
	d := decide(request("DELETE", {"object": null}), active, config)
	d.allowed
	d.warnings == []
}

# ---------------------------------------------------------------------------
# This cluster does not hold the fence, enforcement "deny".

test_not_holding_denies_creates_and_updates_with_the_status_message if {
	every status in not_holding {
		every operation in ["CREATE", "UPDATE"] {
			d := decide(request(operation, {}), fence(status), config)
			not d.allowed
			d.reasons == [message(fence(status))]
			d.warnings == []
			d.patch == []
			d.violations == []
		}
	}
}

test_fenced_denial_names_cluster_epoch_holder_and_what_to_do if {
	d := decide(request("CREATE", {}), fence("fenced"), config)
	d.reasons == [concat(" ", [
		`fencegate: cluster "west" (epoch 3) does not hold the ownership fence of domain "default": cluster "east" holds it at epoch 7.`,
		"Components can only change on the cluster that holds the fence.",
		`To fail over to west, run fencegate failover --to west, or raise spec.epoch of the Fence "default" on west above 7 (to 8).`,
	])]
}

test_not_holding_denies_without_a_fence_state if {
	d := admission.decision with input as request("CREATE", {}) with data.fencegate.config as config
	not d.allowed
	contains(d.reasons[0], "no fence state has been written yet")
}

test_not_holding_admits_deletes_with_a_warning if {
	every status in not_holding {
		d := decide(request("DELETE", {"object": null}), fence(status), config)
		d.allowed
		d.reasons == []
		d.patch == []
		d.warnings == [concat(" ", [
			`fencegate: this delete removes the Component from cluster "west" only, which does not hold the ownership fence`,
			`of domain "default" (cluster "east" holds it at epoch 7); the Component on the cluster that holds the fence is not affected.`,
		])]
	}
}

deleting(finalizers, spec) := object.union(plain, {
	"metadata": {"name": "billing", "namespace": "default", "deletionTimestamp": "2030-01-02T03:04:05Z", "finalizers": finalizers},
	"spec": spec,
})

test_not_holding_admits_the_removal_of_a_deleted_components_finalizers if {
	every status in not_holding {
		old := deleting(["example.dev/helm", "example.dev/other"], {"enabled": true})
		d := decide(request("UPDATE", {"oldObject": old, "object": deleting(["example.dev/other"], {"enabled": true})}), fence(status), config)
		d.allowed
		d.reasons == []
	}
}

test_not_holding_denies_other_changes_of_a_deleted_component if {
	old := deleting(["example.dev/helm"], {"enabled": true})
	changes := {
		"a finalizer added": deleting(["example.dev/helm", "example.dev/more"], {"enabled": true}),
	}
	every _, object in changes {
		d := decide(request("UPDATE", {"oldObject": old, "object": object}), fence("fenced"), config)
		not d.allowed
	}

	# Nor is a finalizer-only update of a Component not being deleted.
	live := object.union(plain, {"metadata": {"name": "billing", "namespace": "default", "finalizers": ["example.dev/helm"]}})
	not decide(request("UPDATE", {"oldObject": live, "object": plain}), fence("fenced"), config).allowed
}

test_controller_status_updates_are_always_admitted if {
	every status in not_holding {
		d := decide(
			request("UPDATE", {"subResource": "status", "userInfo": {"username": "system:serviceaccount:fencegate:fencegate", "groups": []}}),
			fence(status), config,
		)
		d.allowed
		d.warnings == []
		d.patch == []
	}
}

test_status_updates_by_others_are_denied if {
	d := decide(request("UPDATE", {"subResource": "status"}), fence("fenced"), config)
	not d.allowed
}

test_the_controller_may_not_change_the_component_itself if {
	d := decide(
		request("UPDATE", {"userInfo": {"username": "system:serviceaccount:fencegate:fencegate", "groups": []}}),
		fence("fenced"), config,
	)
	not d.allowed
}

test_dry_run_requests_get_the_same_decision if {
	every status in array.concat(["active"], not_holding) {
		state := object.union(fence(status), {"cluster": east})
		every operation in ["CREATE", "UPDATE", "DELETE"] {
			decide(request(operation, {"dryRun": true}), state, config) == decide(request(operation, {"dryRun": false}), state, config)
		}
	}
}

test_other_kinds_are_admitted_untouched if {
	req := request("CREATE", {"kind": {"group": "", "version": "v1", "kind": "ConfigMap"}})
	d := decide(req, fence("fenced"), config)
	d == {"allowed": true, "reason": "", "reasons": [], "warnings": [], "patch": [], "violations": []}
}

# ---------------------------------------------------------------------------
# Exemptions (break-glass).

exempt_config := object.union(config, {
	"exempt_users": ["root-admin"],
	"exempt_groups": ["break-glass"],
	"exempt_namespaces": ["sandbox"],
})

marks := [{"op": "add", "path": "/metadata/annotations", "value": {"fencegate.dev/fenced": "true", "fencegate.dev/fenced-by": "east@7"}}]

test_exempt_requests_are_admitted_marked_and_warned if {
	cases := {
		`user "root-admin" is exempt`: {"userInfo": {"username": "root-admin", "groups": []}},
		`group "break-glass" is exempt`: {"userInfo": {"username": "alice", "groups": ["developers", "break-glass"]}},
		`namespace "sandbox" is exempt`: {"namespace": "sandbox"},
	}
	every why, fields in cases {
		every status in not_holding {
			d := decide(request("UPDATE", fields), fence(status), exempt_config)
			d.allowed
			d.reasons == []
			d.violations == []
			d.patch == marks
			d.warnings == [sprintf("fencegate: admitted because %s: %s", [why, explanation(fence(status))])]
		}
	}
}

test_every_exemption_that_applies_is_named if {
	fields := {"namespace": "sandbox", "userInfo": {"username": "root-admin", "groups": ["break-glass"]}}
	d := decide(request("CREATE", fields), fence("fenced"), exempt_config)
	startswith(d.warnings[0], `fencegate: admitted because group "break-glass" is exempt and namespace "sandbox" is exempt and user "root-admin" is exempt: `)
}

test_exemptions_change_nothing_while_active if {
	d := decide(request("UPDATE", {"userInfo": {"username": "root-admin", "groups": []}}), active, exempt_config)
	d.warnings == []
	d.patch == [{"op": "add", "path": "/metadata/annotations", "value": {"fencegate.dev/epoch": "7", "fencegate.dev/token": "1042"}}]
}

test_non_exempt_requests_are_still_denied if {
	d := decide(request("UPDATE", {}), fence("fenced"), exempt_config)
	not d.allowed
}

# ---------------------------------------------------------------------------
# Enforcement "warn" and "dryrun".

test_warn_admits_marks_and_warns if {
	every status in not_holding {
		d := decide(request("CREATE", {}), fence(status), object.union(config, {"enforcement": "warn"}))
		d.allowed
		d.reasons == []
		d.violations == [message(fence(status))]
		d.patch == marks
		d.warnings == [concat("", ["fencegate: admitted only because enforcement is \"warn\": ", explanation(fence(status))])]
	}
}

test_dryrun_admits_and_marks_silently if {
	every status in not_holding {
		d := decide(request("UPDATE", {}), fence(status), object.union(config, {"enforcement": "dryrun"}))
		d.allowed
		d.reasons == []
		d.warnings == []
		d.violations == [message(fence(status))]
		d.patch == marks
	}
}

test_marks_name_an_unknown_holder if {
	state := {"status": "unknown", "domain": "default", "cluster": west, "holder": {"name": "", "uid": "", "epoch": 0}, "token": 0}
	d := decide(request("CREATE", {}), state, object.union(config, {"enforcement": "warn"}))
	d.patch == [{"op": "add", "path": "/metadata/annotations", "value": {"fencegate.dev/fenced": "true", "fencegate.dev/fenced-by": "unknown"}}]
}

test_marks_are_added_to_existing_annotations if {
	obj := annotated({"team": "payments", "fencegate.dev/epoch": "3"})
	d := decide(request("UPDATE", {"object": obj}), fence("fenced"), object.union(config, {"enforcement": "warn"}))
	d.patch == [
		{"op": "add", "path": "/metadata/annotations/fencegate.dev~1fenced", "value": "true"},
		{"op": "add", "path": "/metadata/annotations/fencegate.dev~1fenced-by", "value": "east@7"},
	]
}

# ---------------------------------------------------------------------------
# Helpers.

test_annotation_path_escapes_json_pointer_characters if {
	admission.annotation_path("fencegate.dev/epoch") == "/metadata/annotations/fencegate.dev~1epoch"
	admission.annotation_path("a~b/c") == "/metadata/annotations/a~0b~1c"
}

# ---------------------------------------------------------------------------
# Write tokens: a gated write asserts the token it was decided under.

asserting(token) := annotated({"fencegate.dev/write-token": token, "fencegate.dev/token": "1042", "fencegate.dev/epoch": "7"})

remove_assertion := {"op": "remove", "path": "/metadata/annotations/fencegate.dev~1write-token"}

test_a_current_write_token_is_admitted_and_removed if {
	every token in ["1042", "1043"] {
		d := decide(request("UPDATE", {"object": asserting(token)}), active, config)
		d.allowed
		d.reason == ""
		d.patch == [remove_assertion]
	}
}

test_a_stale_write_token_is_denied_even_on_the_holder if {
	every operation in ["CREATE", "UPDATE"] {
		d := decide(request(operation, {"object": asserting("1041")}), active, config)
		not d.allowed
		d.reason == "STALE_FENCING_TOKEN"
		d.patch == []
		count(d.reasons) == 1
		contains(d.reasons[0], "STALE_FENCING_TOKEN")
		contains(d.reasons[0], "fencing token 1041")
		contains(d.reasons[0], "now at token 1042")
	}
}

test_a_stale_write_token_on_a_fenced_cluster_gives_both_reasons if {
	d := decide(request("UPDATE", {"object": asserting("7")}), fence("fenced"), config)
	not d.allowed
	d.reason == ""
	count(d.reasons) == 2
}

test_a_stale_write_token_is_refused_whoever_is_exempt if {
	d := decide(request("UPDATE", {"object": asserting("1041"), "userInfo": {"username": "root-admin", "groups": []}}), active, exempt_config)
	not d.allowed
	d.reason == "STALE_FENCING_TOKEN"
}

test_a_stale_write_token_only_warns_under_warn if {
	d := decide(request("UPDATE", {"object": asserting("1041")}), active, object.union(config, {"enforcement": "warn"}))
	d.allowed
	some w in d.warnings
	contains(w, "STALE_FENCING_TOKEN")
	d.patch == [remove_assertion]
}

test_a_write_without_assertion_is_never_refused_for_its_token if {
	# A kubectl edit after a failback sends back the stored, older token.
	d := decide(request("UPDATE", {"object": annotated({"fencegate.dev/token": "7", "fencegate.dev/epoch": "7"})}), active, config)
	d.allowed
	d.reason == ""
	{"op": "add", "path": "/metadata/annotations/fencegate.dev~1token", "value": "1042"} in d.patch
}

test_a_malformed_write_token_is_refused_whatever_the_fence if {
	every token in ["", "abc", "-1", "1e3", "12345678901234567890"] {
		every state in [active, fence("fenced")] {
			d := decide(request("UPDATE", {"object": asserting(token)}), state, config)
			not d.allowed
			some r in d.reasons
			contains(r, "annotation fencegate.dev/write-token is")
		}
	}
}

test_deletes_ignore_write_tokens if {
	d := decide(request("DELETE", {"object": null, "oldObject": asserting("1")}), active, config)
	d.allowed
}

# Only what the request changes asserts a token: a stored annotation sent
# back unchanged (stored by a write no webhook saw) is no assertion.

test_a_stored_write_token_sent_back_unchanged_asserts_nothing if {
	every state in [active, fence("fenced")] {
		every settings in [config, object.union(config, {"enforcement": "warn"})] {
			d := decide(request("UPDATE", {"object": asserting("1041"), "oldObject": asserting("1041")}), state, settings)
			d.reason == ""
			every r in array.concat(d.reasons, d.violations) {
				not contains(r, "STALE_FENCING_TOKEN")
			}
			every w in d.warnings {
				not contains(w, "STALE_FENCING_TOKEN")
			}
		}
	}
}

test_a_stored_write_token_is_removed_by_the_first_admitted_change if {
	d := decide(request("UPDATE", {"object": asserting("1041"), "oldObject": asserting("1041")}), active, config)
	d.allowed
	d.patch == [remove_assertion]
}

test_a_stored_malformed_write_token_sent_back_unchanged_is_not_refused if {
	d := decide(request("UPDATE", {"object": asserting("abc"), "oldObject": asserting("abc")}), active, config)
	d.allowed
	d.patch == [remove_assertion]
}

test_a_changed_write_token_asserts_it if {
	# A gated writer asserting a token other than the stored one.
	d := decide(request("UPDATE", {"object": asserting("1041"), "oldObject": asserting("1042")}), active, config)
	not d.allowed
	d.reason == "STALE_FENCING_TOKEN"
}

test_an_update_without_an_old_object_asserts_what_it_carries if {
	d := decide(request("UPDATE", {"object": asserting("1041"), "oldObject": null}), active, config)
	not d.allowed
	d.reason == "STALE_FENCING_TOKEN"
}

test_removing_a_stored_write_token_asserts_nothing if {
	d := decide(request("UPDATE", {"oldObject": asserting("1041")}), active, config)
	d.allowed
	d.reason == ""
}

test_a_status_update_leaves_a_stored_write_token_alone if {
	d := decide(
		request("UPDATE", {
			"subResource": "status", "object": asserting("1041"), "oldObject": asserting("1041"),
			"userInfo": {"username": "system:serviceaccount:fencegate:fencegate"},
		}),
		fence("fenced"), config,
	)
	d.allowed
	d.patch == []
}

# ---------------------------------------------------------------------------
# Other fenced kinds (settings.fenced_kinds): an actuator's objects.

cronjob := {
	"apiVersion": "batch/v1",
	"kind": "CronJob",
	"metadata": {"name": "report", "namespace": "default"},
	"spec": {"schedule": "* * * * *", "suspend": false},
}

cronjob_request(operation, fields) := request(operation, object.union(
	{
		"kind": {"group": "batch", "version": "v1", "kind": "CronJob"},
		"resource": {"group": "batch", "version": "v1", "resource": "cronjobs"},
		"name": "report",
		"object": cronjob,
		"oldObject": cronjob,
	},
	fields,
))

fenced_cronjobs := object.union(config, {"fenced_kinds": [{"group": "batch", "kind": "CronJob"}]})

hold_options := {"options": {"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions", "fieldManager": "fencegate-hold"}}

test_a_kind_not_configured_is_admitted_untouched if {
	every status in not_holding {
		d := decide(cronjob_request("UPDATE", {}), fence(status), config)
		d.allowed
		d.patch == []
	}
}

test_a_configured_kind_is_denied_while_not_holding if {
	every status in not_holding {
		d := decide(cronjob_request("UPDATE", {}), fence(status), fenced_cronjobs)
		not d.allowed
		d.reasons == [concat("", ["fencegate: CronJob is a kind fenced like Components here (admission.kinds). ", explanation(fence(status))])]
	}
}

test_a_configured_kind_is_stamped_on_the_holder if {
	d := decide(cronjob_request("CREATE", {}), active, fenced_cronjobs)
	d.allowed
	d.patch == [{"op": "add", "path": "/metadata/annotations", "value": {"fencegate.dev/epoch": "7", "fencegate.dev/token": "1042"}}]
}

test_a_configured_kind_may_be_deleted_while_not_holding if {
	d := decide(cronjob_request("DELETE", {}), fence("fenced"), fenced_cronjobs)
	d.allowed
}

test_the_hold_controllers_patches_are_admitted_and_never_marked if {
	every status in array.concat(not_holding, ["active"]) {
		state := object.union(fence(status), {"status": status})
		d := decide(cronjob_request("UPDATE", object.union(hold_options, {"userInfo": {"username": "system:serviceaccount:fencegate:fencegate"}})), state, fenced_cronjobs)
		d.allowed
		d.patch == []
		d.warnings == []
	}
}

# After a failover, an actuator's object that carries a stored write token
# from before (below the fence's token now) can still be held and released.
test_the_hold_controllers_patches_are_never_refused_for_a_token if {
	stored := object.union(cronjob, {"metadata": {"name": "report", "namespace": "default", "annotations": {"fencegate.dev/write-token": "5"}}})
	held := object.union(stored, {"spec": {"schedule": "* * * * *", "suspend": true}})
	hold_user := {"userInfo": {"username": "system:serviceaccount:fencegate:fencegate"}}
	every status in array.concat(not_holding, ["active"]) {
		state := object.union(fence(status), {"status": status})
		every old in [stored, cronjob] {
			# The stored token sent back, and one the patch would set.
			d := decide(cronjob_request("UPDATE", object.union(hold_options, object.union(hold_user, {"object": held, "oldObject": old}))), state, fenced_cronjobs)
			d.allowed
			d.reason == ""
			d.patch == []
		}
	}
}

test_a_write_token_set_under_the_hold_field_manager_by_anyone_else_is_checked if {
	stale := object.union(cronjob, {"metadata": {"name": "report", "namespace": "default", "annotations": {"fencegate.dev/write-token": "5"}}})
	d := decide(cronjob_request("UPDATE", object.union(hold_options, {"object": stale})), active, fenced_cronjobs)
	not d.allowed
	d.reason == "STALE_FENCING_TOKEN"
}

test_fencegate_hold_as_field_manager_opens_nothing_to_anyone_else if {
	d := decide(cronjob_request("UPDATE", hold_options), fence("fenced"), fenced_cronjobs)
	not d.allowed
}

test_fencegate_hold_as_field_manager_never_opens_components if {
	d := decide(request("UPDATE", object.union(hold_options, {"userInfo": {"username": "system:serviceaccount:fencegate:fencegate"}})), fence("fenced"), fenced_cronjobs)
	not d.allowed
}

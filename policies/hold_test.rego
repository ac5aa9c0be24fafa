package fencegate.hold_test

import data.fencegate.hold

# ---------------------------------------------------------------------------
# Fixtures.

east := {"name": "east", "uid": "east-uid", "epoch": 7}

west := {"name": "west", "uid": "west-uid", "epoch": 3}

active := {"status": "active", "domain": "default", "cluster": east, "holder": east, "token": 1042}

fence(status) := {"status": status, "domain": "default", "cluster": west, "holder": east, "token": 1042}

not_holding := ["fenced", "epoch_regressed", "acquiring", "unknown", "unsupported", "bogus"]

resource(api_version, kind, extra) := object.union(
	{"apiVersion": api_version, "kind": kind, "metadata": {"name": "app", "namespace": "team"}},
	extra,
)

decide(o, state) := d if {
	d := hold.decision with input as {"object": o, "domain": "default"} with data.fence as state
}

suspend := [{"path": ["spec", "suspend"], "value": true}]

keda_paused := [{"path": ["metadata", "annotations", "autoscaling.keda.sh/paused"], "value": "true"}]

paused_condition := {"type": "Paused", "status": "True", "reason": "ScaledObjectPaused", "message": "ScaledObject is paused"}

# One object of each shipped kind as it is before fencegate holds it, and
# the fields that hold it.
shipped := {
	"flux-kustomization": {
		"object": resource("kustomize.toolkit.fluxcd.io/v1", "Kustomization", {"spec": {"interval": "5m", "suspend": false}}),
		"fields": suspend,
	},
	"flux-helmrelease": {
		"object": resource("helm.toolkit.fluxcd.io/v2", "HelmRelease", {"spec": {"interval": "5m"}}),
		"fields": suspend,
	},
	"argocd-application": {
		"object": resource("argoproj.io/v1alpha1", "Application", {"spec": {"syncPolicy": {"automated": {"prune": true, "selfHeal": true}}}}),
		"fields": [{"path": ["spec", "syncPolicy", "automated", "enabled"], "value": false}],
	},
	"crossplane-managed": {
		"object": resource("s3.aws.upbound.io/v1beta1", "Bucket", {"spec": {"forProvider": {"region": "eu-west-1"}, "managementPolicies": ["*"]}}),
		"fields": [{"path": ["spec", "managementPolicies"], "value": ["Observe"]}],
	},
	"cronjob": {
		"object": resource("batch/v1", "CronJob", {"spec": {"schedule": "*/5 * * * *"}}),
		"fields": suspend,
	},
	"keda-scaledobject": {
		"object": resource("keda.sh/v1alpha1", "ScaledObject", {"spec": {"scaleTargetRef": {"name": "app"}}}),
		"fields": keda_paused,
	},
	"keda-scaledjob": {
		"object": resource("keda.sh/v1alpha1", "ScaledJob", {"spec": {"jobTargetRef": {}}}),
		"fields": keda_paused,
	},
	"velero-schedule": {
		"object": resource("velero.io/v1", "Schedule", {"spec": {"schedule": "@daily"}}),
		"fields": [{"path": ["spec", "paused"], "value": true}],
	},
	"argo-cronworkflow": {
		"object": resource("argoproj.io/v1alpha1", "CronWorkflow", {"spec": {"schedule": "0 * * * *"}}),
		"fields": suspend,
	},
}

# Each shipped kind once held and settled: its flag set, its actuator
# reporting nothing running.
settled := {
	"flux-kustomization": resource("kustomize.toolkit.fluxcd.io/v1", "Kustomization", {
		"metadata": {"name": "app", "namespace": "team", "generation": 5},
		"spec": {"suspend": true},
		"status": {"observedGeneration": 5, "conditions": [{"type": "Ready", "status": "True", "reason": "ReconciliationSucceeded", "message": "Applied revision: main@sha1:abc"}]},
	}),
	"flux-helmrelease": resource("helm.toolkit.fluxcd.io/v2", "HelmRelease", {
		"spec": {"suspend": true},
		"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "UpgradeSucceeded", "message": "Helm upgrade succeeded"}]},
	}),
	"argocd-application": resource("argoproj.io/v1alpha1", "Application", {
		"spec": {"syncPolicy": {"automated": {"prune": true, "selfHeal": true, "enabled": false}}},
		"status": {"operationState": {"phase": "Succeeded", "message": "successfully synced (all tasks run)"}},
	}),
	"crossplane-managed": resource("s3.aws.upbound.io/v1beta1", "Bucket", {
		"metadata": {"name": "app", "namespace": "team", "generation": 3},
		"spec": {"forProvider": {"region": "eu-west-1"}, "managementPolicies": ["Observe"]},
		"status": {"conditions": [
			{"type": "Synced", "status": "True", "reason": "ReconcileSuccess", "observedGeneration": 3},
			{"type": "AsyncOperation", "status": "True", "reason": "Finished"},
		]},
	}),
	"cronjob": resource("batch/v1", "CronJob", {"spec": {"suspend": true}, "status": {"active": []}}),
	"keda-scaledobject": resource("keda.sh/v1alpha1", "ScaledObject", {
		"metadata": {"name": "app", "namespace": "team", "annotations": {"autoscaling.keda.sh/paused": "true"}},
		"status": {"conditions": [paused_condition]},
	}),
	"keda-scaledjob": resource("keda.sh/v1alpha1", "ScaledJob", {
		"metadata": {"name": "app", "namespace": "team", "annotations": {"autoscaling.keda.sh/paused": "true"}},
		"status": {"conditions": [object.union(paused_condition, {"reason": "ScaledJobPaused"})]},
	}),
	"velero-schedule": resource("velero.io/v1", "Schedule", {"spec": {"paused": true}, "status": {"phase": "Enabled"}}),
	"argo-cronworkflow": resource("argoproj.io/v1alpha1", "CronWorkflow", {"spec": {"suspend": true}, "status": {"active": []}}),
}

# Each shipped kind held (its flag set) while its actuator still works, and
# what the decision says about it.
flux_progressing := [
	{"type": "Reconciling", "status": "True", "reason": "Progressing", "message": "Fetching manifests for revision main@sha1:def with a timeout of 5m0s"},
	{"type": "Ready", "status": "Unknown", "reason": "Progressing", "message": "Reconciliation in progress"},
]

busy := {
	"flux-kustomization": [
		resource("kustomize.toolkit.fluxcd.io/v1", "Kustomization", {"spec": {"suspend": true}, "status": {"conditions": flux_progressing}}),
		"Kustomization team/app: still reconciling (Ready=Unknown, Progressing: Reconciliation in progress; Reconciling=True, Progressing: Fetching manifests for revision main@sha1:def with a timeout of 5m0s)",
	],
	"flux-helmrelease": [
		resource("helm.toolkit.fluxcd.io/v2", "HelmRelease", {"spec": {"suspend": true}, "status": {"conditions": [{"type": "Reconciling", "status": "True", "reason": "Progressing"}]}}),
		"HelmRelease team/app: still reconciling (Reconciling=True, Progressing)",
	],
	"argocd-application": [
		resource("argoproj.io/v1alpha1", "Application", {
			"spec": {"syncPolicy": {"automated": {"enabled": false}}},
			"operation": {"sync": {"revision": "abc"}},
			"status": {"operationState": {"phase": "Running", "message": "one or more tasks are running"}},
		}),
		"Application team/app: an operation is running: one or more tasks are running",
	],
	"crossplane-managed": [
		resource("ec2.aws.upbound.io/v1beta1", "Instance", {
			"spec": {"forProvider": {"region": "eu-west-1"}, "managementPolicies": ["Observe"]},
			"status": {"conditions": [{"type": "AsyncOperation", "status": "False", "reason": "Ongoing"}]},
		}),
		"Instance team/app: an asynchronous provider operation is ongoing",
	],
	"cronjob": [
		resource("batch/v1", "CronJob", {"metadata": {"name": "nightly", "namespace": "default"}, "spec": {"suspend": true}, "status": {"active": [{"name": "nightly-1"}, {"name": "nightly-2"}]}}),
		"CronJob default/nightly: 2 Jobs still running",
	],
	"keda-scaledobject": [
		resource("keda.sh/v1alpha1", "ScaledObject", {
			"metadata": {"name": "app", "namespace": "team", "annotations": {"autoscaling.keda.sh/paused": "true"}},
			"status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Paused", "status": "False"}]},
		}),
		"ScaledObject team/app: KEDA does not report it paused (no Paused=True condition)",
	],
	"keda-scaledjob": [
		resource("keda.sh/v1alpha1", "ScaledJob", {"metadata": {"name": "app", "namespace": "team", "annotations": {"autoscaling.keda.sh/paused": "true"}}}),
		"ScaledJob team/app: KEDA does not report it paused (no Paused=True condition)",
	],
	"argo-cronworkflow": [
		resource("argoproj.io/v1alpha1", "CronWorkflow", {"spec": {"suspend": true}, "status": {"active": [{"name": "app-1700000000"}]}}),
		"CronWorkflow team/app: 1 Workflow still running",
	],
}

# What each unheld object in shipped says while its flag is not set.
unset := {
	"flux-kustomization": "Kustomization team/app: spec.suspend is not true",
	"flux-helmrelease": "HelmRelease team/app: spec.suspend is not true",
	"argocd-application": "Application team/app: spec.syncPolicy.automated.enabled is not false",
	"crossplane-managed": `Bucket team/app: spec.managementPolicies is not ["Observe"]`,
	"cronjob": "CronJob team/app: spec.suspend is not true",
	"keda-scaledobject": `ScaledObject team/app: KEDA does not report it paused (no Paused=True condition); metadata.annotations["autoscaling.keda.sh/paused"] is not "true"`,
	"keda-scaledjob": `ScaledJob team/app: KEDA does not report it paused (no Paused=True condition); metadata.annotations["autoscaling.keda.sh/paused"] is not "true"`,
	"velero-schedule": "Schedule team/app: spec.paused is not true",
	"argo-cronworkflow": "CronWorkflow team/app: spec.suspend is not true",
}

nothing := {"kind": "", "hold": false, "fields": [], "quiet": true, "activity": "", "parents": []}

# ---------------------------------------------------------------------------
# Holding and releasing.

test_every_shipped_kind_is_held_while_this_cluster_does_not_hold_the_fence if {
	every name, c in shipped {
		every status in not_holding {
			d := decide(c.object, fence(status))
			d.kind == name
			d.hold
			d.fields == c.fields
		}
	}
}

test_every_shipped_kind_is_released_with_the_same_fields_while_this_cluster_holds_the_fence if {
	every name, c in shipped {
		d := decide(c.object, active)
		d.kind == name
		not d.hold
		d.fields == c.fields
		d.fields == decide(c.object, fence("fenced")).fields
		d.fields == decide(settled[name], active).fields
	}
}

test_no_fence_state_holds if {
	every c in shipped {
		d := hold.decision with input as {"object": c.object, "domain": "default"}
		d.hold
	}
}

test_a_state_of_another_domain_or_no_domain_holds if {
	o := shipped.cronjob.object
	hold.decision.hold with input as {"object": o, "domain": "payments"} with data.fence as active
	hold.decision.hold with input as {"object": o} with data.fence as active
	hold.decision.hold with input as {"object": o, "domain": ""} with data.fence as active
}

test_each_domain_is_released_by_its_own_state if {
	payments := object.union(active, {"domain": "payments"})
	not hold.decision.hold with input as {"object": shipped.cronjob.object, "domain": "payments"} with data.fence as payments
	hold.decision.hold with input as {"object": shipped.cronjob.object, "domain": "default"} with data.fence as payments

	# A hand-written state without a domain is the default domain's.
	not hold.decision.hold with input as {"object": shipped.cronjob.object, "domain": "default"} with data.fence as {"status": "active"}
}

test_any_version_of_the_group_is_held if {
	every api_version, name in {
		"kustomize.toolkit.fluxcd.io/v1beta2": "flux-kustomization",
		"helm.toolkit.fluxcd.io/v2beta1": "flux-helmrelease",
		"batch/v1beta1": "cronjob",
		"keda.sh/v1beta1": "keda-scaledobject",
	} {
		kind := shipped[name].object.kind
		decide(resource(api_version, kind, {}), fence("fenced")).kind == name
	}
}

test_a_kind_of_another_group_is_not_held if {
	every o in [
		resource("kustomize.config.k8s.io/v1beta1", "Kustomization", {}),
		resource("example.com/v1", "CronJob", {"spec": {"suspend": false}}),
		resource("apps/v1", "Deployment", {"spec": {"replicas": 3}}),
		resource("v1", "Pod", {}),
		resource("argoproj.io/v1alpha1", "Workflow", {}),
	] {
		decide(o, fence("fenced")) == nothing
	}
}

# ---------------------------------------------------------------------------
# Quiet.

test_every_shipped_kind_is_quiet_once_its_flag_is_set_and_nothing_runs if {
	every name, o in settled {
		d := decide(o, fence("fenced"))
		d.kind == name
		d.quiet
		d.activity == ""
	}
}

test_every_shipped_kind_that_reports_work_is_not_quiet_while_it_runs if {
	every name, c in busy {
		d := decide(c[0], fence("fenced"))
		d.kind == name
		not d.quiet
		d.activity == c[1]
	}
}

test_every_shipped_kind_is_not_quiet_while_its_flag_is_not_set if {
	every name, c in shipped {
		d := decide(c.object, fence("fenced"))
		not d.quiet
		d.activity == unset[name]
	}
}

test_a_flag_at_another_value_is_not_set if {
	o := resource("batch/v1", "CronJob", {"spec": {"suspend": "true"}})
	d := decide(o, fence("fenced"))
	not d.quiet
	d.activity == "CronJob team/app: spec.suspend is not true"
}

test_flux_after_a_failed_attempt_is_quiet if {
	# kustomize-controller keeps Reconciling=True, ProgressingWithRetry beside
	# Ready=False on a suspended object; its retry never comes.
	o := resource("kustomize.toolkit.fluxcd.io/v1", "Kustomization", {"spec": {"suspend": true}, "status": {"conditions": [
		{"type": "Reconciling", "status": "True", "reason": "ProgressingWithRetry", "message": "Detecting drift for revision main@sha1:abc"},
		{"type": "Ready", "status": "False", "reason": "ReconciliationFailed", "message": "apply failed"},
	]}})
	decide(o, fence("fenced")).quiet
}

test_flux_retrying_without_a_failed_ready_is_not_quiet if {
	o := resource("helm.toolkit.fluxcd.io/v2", "HelmRelease", {"spec": {"suspend": true}, "status": {"conditions": [
		{"type": "Reconciling", "status": "True", "reason": "ProgressingWithRetry", "message": "retrying"},
	]}})
	d := decide(o, fence("fenced"))
	not d.quiet
	d.activity == "HelmRelease team/app: still reconciling (Reconciling=True, ProgressingWithRetry: retrying)"
}

test_flux_ready_but_behind_its_generation_is_not_quiet if {
	o := resource("kustomize.toolkit.fluxcd.io/v1", "Kustomization", {
		"metadata": {"name": "app", "namespace": "team", "generation": 6},
		"spec": {"suspend": true},
		"status": {"observedGeneration": 5, "conditions": [{"type": "Ready", "status": "True", "reason": "ReconciliationSucceeded"}]},
	})
	d := decide(o, fence("fenced"))
	not d.quiet
	d.activity == "Kustomization team/app: has not observed generation 6 yet (observed 5)"
}

test_argocd_operation_requested_or_terminating_is_not_quiet if {
	every extra, activity in {
		{"operation": {"sync": {}}, "status": {"operationState": {"phase": "Succeeded", "message": "done"}}}: "an operation is requested and has not started",
		{"operation": {"sync": {}}}: "an operation is requested and has not started",
		{"status": {"operationState": {"phase": "Terminating", "message": ""}}}: "an operation is terminating",
	} {
		o := resource("argoproj.io/v1alpha1", "Application", object.union({"spec": {"syncPolicy": {"automated": {"enabled": false}}}}, extra))
		d := decide(o, fence("fenced"))
		not d.quiet
		d.activity == sprintf("Application team/app: %s", [activity])
	}
}

test_argocd_application_without_automated_sync_has_nothing_to_hold if {
	# Holding enabled: false would create automated: {}, which Argo CD reads
	# as automated sync on once enabled is removed again.
	every spec in [{}, {"syncPolicy": {}}, {"syncPolicy": {"automated": null, "syncOptions": ["CreateNamespace=true"]}}] {
		o := resource("argoproj.io/v1alpha1", "Application", {"spec": spec})
		d := decide(o, fence("fenced"))
		d.kind == "argocd-application"
		d.hold
		d.fields == []
		d.quiet
	}

	# ... but a sync a person started still runs.
	running := resource("argoproj.io/v1alpha1", "Application", {"operation": {"sync": {}}, "status": {"operationState": {"phase": "Running"}}})
	decide(running, fence("fenced")).activity == "Application team/app: an operation is running"
}

test_crossplane_managed_resources_match_by_shape if {
	every o in [
		# forProvider alone (a CRD without management policies defaults none).
		resource("ec2.aws.crossplane.io/v1alpha1", "VPC", {"spec": {"forProvider": {"cidrBlock": "10.0.0.0/16"}}}),
		# managementPolicies alone (provider-kubernetes' Object has forProvider.manifest; this one has neither but the policies).
		resource("kubernetes.crossplane.io/v1alpha2", "Object", {"spec": {"managementPolicies": ["*"]}}),
		# Crossplane v2's namespaced managed resources.
		resource("s3.aws.m.upbound.io/v1beta1", "Bucket", {"spec": {"forProvider": {"region": "eu-west-1"}}}),
	] {
		d := decide(o, fence("fenced"))
		d.kind == "crossplane-managed"
		d.fields == [{"path": ["spec", "managementPolicies"], "value": ["Observe"]}]
	}

	# Core objects are no managed resources, whatever their spec says.
	decide(resource("v1", "ConfigMap", {"spec": {"forProvider": {}}}), fence("fenced")) == nothing
	decide(resource("example.com/v1", "Thing", {"spec": {"forProvider": "x", "managementPolicies": "x"}}), fence("fenced")) == nothing
}

test_crossplane_provider_behind_its_generation_is_not_quiet if {
	o := {
		"apiVersion": "s3.aws.upbound.io/v1beta1",
		"kind": "Bucket",
		"metadata": {"name": "app", "generation": 4},
		"spec": {"forProvider": {}, "managementPolicies": ["Observe"]},
		"status": {"conditions": [{"type": "Synced", "status": "True", "reason": "ReconcileSuccess", "observedGeneration": 3}]},
	}
	d := decide(o, fence("fenced"))
	not d.quiet

	# A cluster-scoped object is named by its name.
	d.activity == "Bucket app: the provider has not synced generation 4 yet (synced 3)"
}

test_velero_schedule_is_quiet_by_its_flag if {
	decide(settled["velero-schedule"], fence("fenced")).quiet
	not decide(shipped["velero-schedule"].object, fence("fenced")).quiet
}

test_malformed_status_reports_nothing_running if {
	# Only the flag then says whether the object is held.
	every status in [{"active": "two"}, {"active": 2, "conditions": "Ready"}, {"conditions": ["Ready", {"type": "Paused"}]}] {
		o := resource("batch/v1", "CronJob", {"spec": {"suspend": true}, "status": status})
		decide(o, fence("fenced")).quiet
	}
}

# ---------------------------------------------------------------------------
# Parents.

test_parents_by_flux_labels if {
	o := resource("batch/v1", "CronJob", {"metadata": {"name": "app", "namespace": "team", "labels": {
		"kustomize.toolkit.fluxcd.io/name": "apps",
		"kustomize.toolkit.fluxcd.io/namespace": "flux-system",
	}}})
	decide(o, fence("fenced")).parents == [{"group": "kustomize.toolkit.fluxcd.io", "kind": "Kustomization", "name": "apps", "namespace": "flux-system"}]

	h := resource("keda.sh/v1alpha1", "ScaledObject", {"metadata": {"name": "app", "namespace": "team", "labels": {
		"helm.toolkit.fluxcd.io/name": "app",
		"helm.toolkit.fluxcd.io/namespace": "team",
	}}})
	decide(h, active).parents == [{"group": "helm.toolkit.fluxcd.io", "kind": "HelmRelease", "name": "app", "namespace": "team"}]
}

test_a_flux_object_is_not_its_own_parent if {
	labels := {"kustomize.toolkit.fluxcd.io/name": "flux-system", "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}
	own := resource("kustomize.toolkit.fluxcd.io/v1", "Kustomization", {"metadata": {"name": "flux-system", "namespace": "flux-system", "labels": labels}})
	decide(own, fence("fenced")).parents == []

	child := resource("kustomize.toolkit.fluxcd.io/v1", "Kustomization", {"metadata": {"name": "apps", "namespace": "flux-system", "labels": labels}})
	decide(child, fence("fenced")).parents == [{"group": "kustomize.toolkit.fluxcd.io", "kind": "Kustomization", "name": "flux-system", "namespace": "flux-system"}]
}

test_parents_by_applicationset_owner if {
	o := resource("argoproj.io/v1alpha1", "Application", {"metadata": {"name": "app-east", "namespace": "argocd", "ownerReferences": [
		{"apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet", "name": "apps", "uid": "u1", "controller": true},
		{"apiVersion": "example.com/v1", "kind": "ApplicationSet", "name": "other", "uid": "u2"},
		{"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "uid": "u3"},
	]}})
	decide(o, fence("fenced")).parents == [{"group": "argoproj.io", "kind": "ApplicationSet", "name": "apps", "namespace": "argocd"}]
}

test_parents_by_argocd_tracking if {
	every id, parent in {
		"payments:batch/CronJob:team/app": {"group": "argoproj.io", "kind": "Application", "name": "payments", "namespace": ""},
		"apps_payments:batch/CronJob:team/app": {"group": "argoproj.io", "kind": "Application", "name": "payments", "namespace": "apps"},
	} {
		o := resource("batch/v1", "CronJob", {"metadata": {"name": "app", "namespace": "team", "annotations": {"argocd.argoproj.io/tracking-id": id}}})
		decide(o, fence("fenced")).parents == [parent]
	}
	every id in [":batch/CronJob:team/app", 42] {
		o := resource("batch/v1", "CronJob", {"metadata": {"name": "app", "namespace": "team", "annotations": {"argocd.argoproj.io/tracking-id": id}}})
		decide(o, fence("fenced")).parents == []
	}
}

test_several_parents_are_sorted if {
	o := resource("argoproj.io/v1alpha1", "Application", {"metadata": {
		"name": "app",
		"namespace": "argocd",
		"labels": {"kustomize.toolkit.fluxcd.io/name": "apps", "kustomize.toolkit.fluxcd.io/namespace": "flux-system"},
		"annotations": {"argocd.argoproj.io/tracking-id": "root:argoproj.io/Application:argocd/app"},
		"ownerReferences": [{"apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet", "name": "apps"}],
	}})
	decide(o, fence("fenced")).parents == [
		{"group": "argoproj.io", "kind": "Application", "name": "root", "namespace": ""},
		{"group": "argoproj.io", "kind": "ApplicationSet", "name": "apps", "namespace": "argocd"},
		{"group": "kustomize.toolkit.fluxcd.io", "kind": "Kustomization", "name": "apps", "namespace": "flux-system"},
	]
}

test_no_parents_without_their_marks_or_of_an_object_of_no_held_kind if {
	every c in shipped {
		decide(c.object, fence("fenced")).parents == []
	}
	labelled := resource("apps/v1", "Deployment", {"metadata": {"name": "app", "namespace": "team", "labels": {"kustomize.toolkit.fluxcd.io/name": "apps"}}})
	decide(labelled, fence("fenced")) == nothing
}

# ---------------------------------------------------------------------------
# Bad input opens nothing.

test_bad_input_is_of_no_held_kind if {
	every i in [
		{},
		{"domain": "default"},
		{"object": "CronJob", "domain": "default"},
		{"object": null, "domain": "default"},
		{"object": {"kind": "CronJob", "spec": {"suspend": false}}, "domain": "default"},
		{"object": {"apiVersion": "batch/v1", "spec": {"suspend": false}}, "domain": "default"},
		{"object": {"apiVersion": 1, "kind": "CronJob"}, "domain": "default"},
		{"object": {"apiVersion": "batch/v1/x", "kind": "CronJob"}, "domain": "default"},
		{"object": {"apiVersion": "batch/v1", "kind": "cronjob"}, "domain": "default"},
		{"object": {"spec": {"forProvider": {}, "managementPolicies": ["*"]}}, "domain": "default"},
	] {
		every state in [active, fence("fenced"), {}] {
			hold.decision == nothing with input as i with data.fence as state
		}
	}
}

test_an_object_without_metadata_is_named_as_well_as_it_can_be if {
	d := decide({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": "x"}, fence("fenced"))
	d.hold
	d.activity == "CronJob : spec.suspend is not true"
}

test_unknown_fence_state_holds_every_shipped_kind if {
	every c in shipped {
		every state in [{}, {"status": "unknown", "domain": "default"}, {"domain": "default"}, {"status": 1, "domain": "default"}] {
			decide(c.object, state).hold
		}
	}
}

# ---------------------------------------------------------------------------
# Kinds an operator adds: an entry of rules in a file of their own in
# package fencegate.hold (here given with `with`, as such a file would define
# it for a Widget).

widget := {
	"apiVersion": "example.com/v1",
	"kind": "Widget",
	"metadata": {"name": "w", "namespace": "team", "labels": {"kustomize.toolkit.fluxcd.io/name": "apps", "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}},
	"spec": {"paused": false},
}

widget_rule := {
	"fields": [{"path": ["spec", "paused"], "value": true}, {"path": ["metadata", "annotations", "example.com/hold"], "value": "fencegate"}],
	"activity": {"3 runs in flight"},
}

test_an_operators_kind_is_held_and_released_like_a_shipped_one if {
	fenced := hold.decision with input as {"object": widget, "domain": "default"}
		with data.fence as fence("fenced")
		with data.fencegate.hold.rules["example-widget"] as widget_rule
	fenced == {
		"kind": "example-widget",
		"hold": true,
		"fields": [
			{"path": ["metadata", "annotations", "example.com/hold"], "value": "fencegate"},
			{"path": ["spec", "paused"], "value": true},
		],
		"quiet": false,
		"activity": `Widget team/w: 3 runs in flight; metadata.annotations["example.com/hold"] is not "fencegate"; spec.paused is not true`,
		"parents": [{"group": "kustomize.toolkit.fluxcd.io", "kind": "Kustomization", "name": "apps", "namespace": "flux-system"}],
	}

	released := hold.decision with input as {"object": widget, "domain": "default"}
		with data.fence as active
		with data.fencegate.hold.rules["example-widget"] as widget_rule
	not released.hold
	released.fields == fenced.fields

	# Without the operator's rule, a Widget is of no held kind.
	decide(widget, fence("fenced")) == nothing
}

test_an_operators_kind_that_overlaps_a_shipped_one_adds_to_it if {
	extra := {"fields": [{"path": ["spec", "startingDeadlineSeconds"], "value": 60}], "activity": set()}
	d := decide(settled.cronjob, fence("fenced")) with data.fencegate.hold.rules["zz-cronjob-deadline"] as extra
	d.kind == "cronjob,zz-cronjob-deadline"
	d.fields == [
		{"path": ["spec", "startingDeadlineSeconds"], "value": 60},
		{"path": ["spec", "suspend"], "value": true},
	]
	d.activity == "CronJob team/app: spec.startingDeadlineSeconds is not 60"
}

test_path_text if {
	hold.path_text(["spec", "suspend"]) == "spec.suspend"
	hold.path_text(["metadata", "annotations", "a.b/c"]) == `metadata.annotations["a.b/c"]`
	hold.path_text(["spec", "containers", 0, "image"]) == "spec.containers[0].image"
	hold.path_text(["weird key"]) == `["weird key"]`
}

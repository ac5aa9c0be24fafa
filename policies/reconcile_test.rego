package fencegate.reconcile_test

import data.fencegate.ownership
import data.fencegate.reconcile

east := {"name": "east", "uid": "east-uid", "epoch": 7}

west := {"name": "west", "uid": "west-uid", "epoch": 3}

component := {"apiVersion": "components.fencegate.dev/v1alpha1", "kind": "Component", "metadata": {"name": "billing", "namespace": "default"}}

test_active_releases_the_hold if {
	fence := {"status": "active", "domain": "default", "cluster": east, "holder": east, "token": 1042}
	d := reconcile.decision with input as {"component": component} with data.fence as fence
	message := ownership.explanation with data.fence as fence
	d == {"hold": false, "reason": "FenceHeld", "message": message}
}

test_every_other_status_holds_with_its_reason if {
	every status, reason in {
		"fenced": "ClusterFenced",
		"epoch_regressed": "ClusterEpochRegressed",
		"acquiring": "FenceAcquiring",
		"unknown": "FenceUnknown",
		"unsupported": "FenceUnknown",
		"bogus": "FenceUnknown",
	} {
		fence := {"status": status, "domain": "default", "cluster": west, "holder": east, "token": 1042}
		d := reconcile.decision with input as {"component": component} with data.fence as fence
		d.hold
		d.reason == reason
		d.message == ownership.explanation with data.fence as fence
	}
}

test_no_fence_state_holds if {
	d := reconcile.decision with input as {"component": component}
	d.hold
	d.reason == "FenceUnknown"
}

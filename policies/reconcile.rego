# What fencegate's controller does with a Component: it evaluates
# data.fencegate.reconcile.decision with input {"component": <the Component>}
# and writes the answer into the Component's status. While "hold" is true the
# Component is not acted on here: SourceConflict=True with the reason below,
# Ready=False, Stalled=True and no published access endpoints.
package fencegate.reconcile

import data.fencegate.ownership

decision := {
	"hold": hold,
	"reason": reason,
	"message": ownership.explanation,
}

# hold: only the cluster that holds the fence acts on Components.
default hold := true

hold := false if ownership.holds

# The SourceConflict condition's reason for each status. Anything that is not
# one of these (unknown, unsupported, a status these policies do not know)
# is FenceUnknown.
reasons := {
	"active": "FenceHeld",
	"fenced": "ClusterFenced",
	"epoch_regressed": "ClusterEpochRegressed",
	"acquiring": "FenceAcquiring",
}

reason := object.get(reasons, ownership.status, "FenceUnknown")

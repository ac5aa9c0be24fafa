package fenceobject

import "github.com/fencegate/fencegate/fenceobject/membership"

// StatusFieldManager is the field manager of the status fields the leader
// applies: everything but status.instances.
const StatusFieldManager = "fencegate-fence-status"

// formerStatusFieldManager is the one the leader applied them as before it
// had its own, the Component controller's: the leader releases what that
// one still owns.
const formerStatusFieldManager = "fencegate-controller"

// maxFieldManager is the longest field manager name the API server takes.
const maxFieldManager = 128

// instanceFieldManager is the field manager of one instance's entry of
// status.instances: one per instance, so that no replica's apply takes
// another's entry away.
func instanceFieldManager(instance string) string {
	const prefix = "fencegate-instance/"
	if len(prefix)+len(instance) <= maxFieldManager {
		return prefix + instance
	}
	return prefix + membership.Digest(instance)
}

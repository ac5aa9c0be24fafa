package fenceobject

import (
	"crypto/sha256"
	"encoding/hex"

	"k8s.io/apimachinery/pkg/util/validation"
)

// FieldManager is the field manager of the status fields the leader
// applies: everything but status.instances.
const FieldManager = "fencegate-controller"

// LabelDomain labels each instance's Lease with the fence domain it is an
// instance of, so that the leader lists the Leases of its domain only.
const LabelDomain = "fencegate.dev/fence-domain"

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
	return prefix + digest(instance)
}

// leaseName is the name of an instance's Lease: the domain and the instance
// name where they make a valid object name, or a digest of the instance
// name otherwise (an instance is any string without spaces).
func leaseName(domain, instance string) string {
	prefix := "fencegate-" + domain + "-"
	if name := prefix + instance; len(validation.IsDNS1123Subdomain(name)) == 0 {
		return name
	}
	return prefix + digest(instance)
}

// digest is a short stable name for a string.
func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:10])
}

package statemachine

import (
	"github.com/fencegate/fencegate/api/fence/rpctypes"
)

// Declaration is a DeclareClusterEpoch request within one domain.
type Declaration struct {
	// Cluster is the declaring cluster.
	Cluster Identity
	// Epoch is the epoch it declares.
	Epoch uint64
	// Instance names the declaring process within the cluster (its pod
	// name, say); each instance has its own lease. Empty is an instance
	// too: the one of clients that do not name theirs.
	Instance string
	// Generation is the cluster generation the instance presents (see
	// Cluster.Generation); 0 if it knows none.
	Generation uint64
	// ID names the declaration among the instance's; a lease it gets is
	// stored with it. 0: none.
	ID uint64
	// KeepLeaseOf asks for the instance's running lease, got by the
	// declaration with this ID, to be kept instead of renewed; 0 asks for a
	// renewal.
	KeepLeaseOf uint64
}

// Release is a ReleaseFence request within one domain.
type Release struct {
	// ClusterUID is the releasing cluster's UID; it must be the holder's.
	ClusterUID string
	// ClusterName, if set, must be the holder's name too.
	ClusterName string
	// Epoch must not be below the epoch the instance last declared.
	Epoch uint64
	// Instance is the releasing instance of the holder; only its lease is
	// released.
	Instance string
}

// Validate checks every field of d by the rules of package rpctypes and
// returns a *rpctypes.FieldError for the first bad one.
func (d Declaration) Validate() error {
	return firstError(
		rpctypes.ValidateClusterName(d.Cluster.Name),
		rpctypes.ValidateClusterUID(d.Cluster.UID),
		rpctypes.ValidateEpoch(d.Epoch),
		rpctypes.ValidateInstance(d.Instance),
	)
}

// Validate checks every field of r by the rules of package rpctypes and
// returns a *rpctypes.FieldError for the first bad one.
func (r Release) Validate() error {
	var name error
	if r.ClusterName != "" {
		name = rpctypes.ValidateClusterName(r.ClusterName)
	}
	return firstError(
		name,
		rpctypes.ValidateClusterUID(r.ClusterUID),
		rpctypes.ValidateEpoch(r.Epoch),
		rpctypes.ValidateInstance(r.Instance),
	)
}

func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

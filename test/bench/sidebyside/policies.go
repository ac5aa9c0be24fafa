package sidebyside

import (
	"context"
	_ "embed"

	"github.com/fencegate/fencegate/engine/enginetest"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/policies"
)

// envelope is the `package system` module that makes OPA's server answer
// AdmissionReviews, as in OPA's Kubernetes admission-control tutorial,
// around fencegate's shipped admission decision.
//
//go:embed system.rego
var envelope string

// envelopeFile is the name the envelope is loaded under.
const envelopeFile = "system.rego"

// opaModules are the modules OPA's server is given: the shipped policies and
// the envelope.
func opaModules() (map[string][]byte, error) {
	modules, err := policies.Shipped()
	if err != nil {
		return nil, err
	}
	modules[envelopeFile] = []byte(envelope)
	return modules, nil
}

// newReference returns the reference evaluation of the shipped policies
// over fence and config (data.fencegate.config), in this process: what both
// servers' answers are checked against.
func newReference(ctx context.Context, fence fencestate.State, config map[string]any) (*enginetest.Reference, error) {
	modules, err := opaModules()
	if err != nil {
		return nil, err
	}
	ref, err := enginetest.NewReference(ctx, modules, config)
	if err != nil {
		return nil, err
	}
	if err := ref.WriteFence(ctx, fence); err != nil {
		return nil, err
	}
	return ref, nil
}

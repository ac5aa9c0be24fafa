// Package promreg registers a component's Prometheus collectors in one call,
// so that every component treats a missing registry and a refused collector
// the same way.
package promreg

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers every collector with reg; a nil reg registers nowhere
// (a component built without metrics). It tries every collector, and its
// error names whose metrics they are (what) and wraps every refusal; a
// refusal usually means that a second instance of the component shares the
// registry.
func Register(reg prometheus.Registerer, what string, collectors ...prometheus.Collector) error {
	if reg == nil {
		return nil
	}
	var errs []error
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("register %s metrics: %w", what, errors.Join(errs...))
	}
	return nil
}

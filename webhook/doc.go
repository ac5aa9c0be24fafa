// Package webhook serves the validating and mutating admission endpoints for
// Components over TLS, answering each AdmissionReview from the policy engine.
package webhook

// Package enginetest builds the fixtures that the tests and benchmarks of the
// engine and of its users (the webhook, the end-to-end tests) share: fence
// states, Components and AdmissionReview bodies as the API server sends them.
package enginetest

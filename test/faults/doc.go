// Package faults holds fault tests: what fencegate does when something it
// depends on breaks while it is under admission load. The fence authority
// is killed with SIGKILL and restarted; the webhook's serving certificate is
// rotated; a policy that does not compile is pushed. Each test drives real
// servers (the authority and control planes as processes, or an in-process
// webhook over TLS) with concurrent AdmissionReviews on kept-alive and fresh
// connections, and checks that no request fails and that what must survive
// did.
package faults

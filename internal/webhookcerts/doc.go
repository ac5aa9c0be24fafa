// Package webhookcerts gives the admission webhook a serving certificate
// without cert-manager: it creates a CA and a serving certificate in a
// Secret, writes the serving pair into the webhook's certificate directory,
// injects the CA bundle into the validating and mutating webhook
// configurations, and renews everything before it expires.
//
// It is built for the failures users of self-signed webhook certificates
// meet in practice:
//
//   - A CA that expires while nothing renews it: the CA is renewed after two
//     thirds of its life, like the serving certificate, and the metric
//     fencegate_webhook_certificate_expiry_timestamp_seconds tells when each
//     expires.
//   - Refused calls while a new CA and the configurations' caBundle disagree:
//     the CAs a new one replaces stay in the bundle until they expire, and a
//     serving certificate signed by a new CA is put in service only once every
//     webhook configuration trusts that CA.
//   - A caBundle reset by a restore from backup or a re-applied manifest:
//     the configurations are watched and repaired as soon as they change.
//   - Ready before able to serve: the channel returned by Add closes only
//     when the files are written and the bundle is injected; ReadyCheck turns
//     it into a readiness check.
//   - Slow first start: the files are written by the process itself, not
//     synced into a mounted Secret volume by the kubelet a minute later.
//
// Every replica runs it, without leader election; replicas that write at the
// same time are serialised by the API server (resourceVersion conflicts) and
// converge on the same Secret.
//
// The Secret holds ca.crt and ca.key (the CA that signs), ca-bundle.crt (the
// CAs the webhook configurations trust, current first), tls.crt and tls.key.
// Access is narrow: the Secret, the two configurations, by name.
//
// Use it from a controller-runtime manager:
//
//	ready, err := webhookcerts.Add(mgr, webhookcerts.Options{
//		Namespace:         ns,
//		SecretName:        "fencegate-webhook-tls",
//		ServiceName:       "fencegate-webhook",
//		CertDir:           "/run/fencegate/webhook-certs",
//		ValidatingWebhook: "fencegate",
//		MutatingWebhook:   "fencegate",
//	})
//	mgr.AddReadyzCheck("webhook-certs", webhookcerts.ReadyCheck(ready))
//	// start the webhook server (which reloads tls.crt/tls.key) after <-ready
package webhookcerts

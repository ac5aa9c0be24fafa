package webhookcerts

import (
	"bytes"
	"crypto/x509"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The keys of the Secret. tls.crt and tls.key follow the kubernetes.io/tls
// convention, so the same Secret could be mounted by hand.
const (
	caCertKey   = "ca.crt"
	caKeyKey    = "ca.key"
	caBundleKey = "ca-bundle.crt"
	certKey     = corev1.TLSCertKey
	keyKey      = corev1.TLSPrivateKeyKey
)

// caSettle is how long a new CA must have existed before serving
// certificates it signs replace ones that still work. The webhook
// configurations trust it as soon as they are updated, but every API server
// of a highly available control plane reads them through its own informer:
// the pause lets the slowest one catch up.
const caSettle = time.Minute

// issuer decides and issues certificates; it holds no state, so every
// decision is a function of the Secret's data, the time and what the webhook
// configurations trust.
type issuer struct {
	caName       string
	hosts        []string
	caValidity   time.Duration
	certValidity time.Duration
}

// plan is what the Secret must hold after one decision.
type plan struct {
	// data is the Secret's new data, or nil when it is already right.
	data map[string][]byte
	// ca is the CA that signs new serving certificates; roots are the CAs
	// the webhook configurations must trust (ca first) and bundle is their
	// PEM; serving is the serving certificate in data.
	ca      *x509.Certificate
	roots   []*x509.Certificate
	bundle  []byte
	serving *x509.Certificate
	// issuedCA and issuedServing say what was newly created.
	issuedCA, issuedServing bool
	// deferred is true while a serving certificate from a new CA waits for
	// the webhook configurations to trust that CA.
	deferred bool
	// next is when the data must be looked at again even if nothing changes.
	next time.Time
}

// decide computes the Secret data that serves safely at now from its current
// data. trusted reports whether every webhook configuration already trusts a
// CA.
//
// A CA is replaced when it is missing, unreadable or past two thirds of its
// life; the CAs it replaces stay in the bundle until they expire, so a
// serving certificate they signed keeps verifying while pods still serve it.
// A serving certificate is replaced when it is missing, unreadable, does not
// verify or cover every host, is past two thirds of its life, or was signed
// by an older CA — but one signed by an older CA that still verifies is
// replaced only once the webhook configurations trust the current CA and
// caSettle has passed since it was made. That ordering is what makes a CA rotation invisible to the API
// server: it trusts the new CA before any pod serves a certificate signed by
// it.
func (is issuer) decide(data map[string][]byte, now time.Time, trusted func(*x509.Certificate) bool) (plan, error) {
	var p plan
	ca, err := parseCA(data[caCertKey], data[caKeyKey])
	if err != nil || now.Before(ca.cert.NotBefore) || !now.Before(renewalTime(ca.cert)) {
		if ca, err = newCA(is.caName, now, is.caValidity); err != nil {
			return plan{}, err
		}
		p.issuedCA = true
	}
	p.ca = ca.cert

	// The bundle: the current CA, then every older CA that has not expired.
	roots := []*x509.Certificate{ca.cert}
	previous, _ := parseCerts(data[caBundleKey]) // an unreadable bundle is rebuilt
	if old, err := parseCerts(data[caCertKey]); err == nil {
		previous = append(previous, old...)
	}
	for _, c := range previous {
		if c.IsCA && now.Before(c.NotAfter) && !containsCert(roots, c) {
			roots = append(roots, c)
		}
	}
	p.roots, p.bundle = roots, encodeCerts(roots)

	servingPEM, keyPEM := data[certKey], data[keyKey]
	serving, verr := verifyServing(servingPEM, keyPEM, roots, is.hosts, now)
	usable := verr == nil
	fromCurrent := usable && serving.CheckSignatureFrom(ca.cert) == nil
	replace := !usable || !fromCurrent || !now.Before(renewalTime(serving))
	settled := ca.cert.NotBefore.Add(backdate + caSettle)
	switch {
	case replace && usable && !fromCurrent && (!trusted(ca.cert) || now.Before(settled)):
		p.deferred = true
	case replace:
		pair, err := newServing(ca, is.hosts, now, is.certValidity)
		if err != nil {
			return plan{}, err
		}
		serving, servingPEM, keyPEM = pair.cert, pair.certPEM, pair.keyPEM
		p.issuedServing = true
	}
	p.serving = serving

	want := map[string][]byte{
		caCertKey:   ca.certPEM,
		caKeyKey:    ca.keyPEM,
		caBundleKey: p.bundle,
		certKey:     servingPEM,
		keyKey:      keyPEM,
	}
	for k, v := range want {
		if !bytes.Equal(data[k], v) {
			p.data = want
			break
		}
	}

	// The next check: the first of these moments still ahead. A deferral
	// waiting for trust ends with a webhook configuration's change, which
	// wakes the loop by itself.
	moments := []time.Time{renewalTime(ca.cert), renewalTime(serving), serving.NotAfter, settled}
	for _, c := range roots[1:] {
		moments = append(moments, c.NotAfter)
	}
	for _, m := range moments {
		if m.After(now) && (p.next.IsZero() || m.Before(p.next)) {
			p.next = m
		}
	}
	return p, nil
}

func containsCert(certs []*x509.Certificate, c *x509.Certificate) bool {
	return slices.ContainsFunc(certs, c.Equal)
}

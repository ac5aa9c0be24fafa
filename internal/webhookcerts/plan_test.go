package webhookcerts

import (
	"bytes"
	"crypto/x509"
	"testing"
	"time"
)

var (
	t0    = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	hosts = []string{"fencegate-webhook.fencegate.svc", "fencegate-webhook", "127.0.0.1"}
)

func testIssuer() issuer {
	return issuer{caName: "test CA", hosts: hosts, caValidity: 300 * time.Hour, certValidity: 30 * time.Hour}
}

// fixture builds Secret data from certificates issued at chosen times.
type fixture struct {
	t      *testing.T
	cas    map[string]*keyPair
	leaves map[string]*keyPair
}

func newFixture(t *testing.T) *fixture {
	return &fixture{t: t, cas: map[string]*keyPair{}, leaves: map[string]*keyPair{}}
}

// ca issues (once) a CA named name at issuedAt.
func (f *fixture) ca(name string, issuedAt time.Time, validity time.Duration) *keyPair {
	f.t.Helper()
	if ca, ok := f.cas[name]; ok {
		return ca
	}
	ca, err := newCA(name, issuedAt, validity)
	if err != nil {
		f.t.Fatal(err)
	}
	f.cas[name] = ca
	return ca
}

// leaf issues (once) a serving certificate named name by ca at issuedAt.
func (f *fixture) leaf(name string, ca *keyPair, issuedAt time.Time, validity time.Duration, hosts []string) *keyPair {
	f.t.Helper()
	if l, ok := f.leaves[name]; ok {
		return l
	}
	l, err := newServing(ca, hosts, issuedAt, validity)
	if err != nil {
		f.t.Fatal(err)
	}
	f.leaves[name] = l
	return l
}

func secretData(ca *keyPair, leaf *keyPair, bundle ...*keyPair) map[string][]byte {
	var certs []*x509.Certificate
	for _, b := range bundle {
		certs = append(certs, b.cert)
	}
	return map[string][]byte{
		caCertKey: ca.certPEM, caKeyKey: ca.keyPEM, caBundleKey: encodeCerts(certs),
		certKey: leaf.certPEM, keyKey: leaf.keyPEM,
	}
}

func TestDecide(t *testing.T) {
	always := func(*x509.Certificate) bool { return true }
	never := func(*x509.Certificate) bool { return false }

	tests := map[string]struct {
		// setup returns the Secret data, the decision time and what the
		// webhook configurations trust.
		setup         func(f *fixture) (map[string][]byte, time.Time, func(*x509.Certificate) bool)
		issuedCA      bool
		issuedServing bool
		deferred      bool
		unchanged     bool
		// bundle names the CAs of the resulting bundle, in order ("new" is
		// a CA issued by decide).
		bundle []string
	}{
		"an empty Secret gets a CA and a serving certificate": {
			setup: func(*fixture) (map[string][]byte, time.Time, func(*x509.Certificate) bool) {
				return nil, t0, never
			},
			issuedCA: true, issuedServing: true, bundle: []string{"new"},
		},
		"unreadable data is replaced": {
			setup: func(*fixture) (map[string][]byte, time.Time, func(*x509.Certificate) bool) {
				junk := []byte("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n")
				return map[string][]byte{caCertKey: junk, caKeyKey: junk, caBundleKey: junk, certKey: junk, keyKey: junk}, t0, never
			},
			issuedCA: true, issuedServing: true, bundle: []string{"new"},
		},
		"valid certificates are left alone": {
			setup: func(f *fixture) (map[string][]byte, time.Time, func(*x509.Certificate) bool) {
				ca := f.ca("a", t0, 300*time.Hour)
				return secretData(ca, f.leaf("l", ca, t0, 30*time.Hour, hosts), ca), t0.Add(10 * time.Hour), always
			},
			unchanged: true, bundle: []string{"a"},
		},
		"a serving certificate past two thirds of its life is renewed by the same CA": {
			setup: func(f *fixture) (map[string][]byte, time.Time, func(*x509.Certificate) bool) {
				ca := f.ca("a", t0, 300*time.Hour)
				leaf := f.leaf("l", ca, t0, 30*time.Hour, hosts)
				return secretData(ca, leaf, ca), renewalTime(leaf.cert), never
			},
			issuedServing: true, bundle: []string{"a"},
		},
		"a serving certificate that misses a host is reissued": {
			setup: func(f *fixture) (map[string][]byte, time.Time, func(*x509.Certificate) bool) {
				ca := f.ca("a", t0, 300*time.Hour)
				return secretData(ca, f.leaf("l", ca, t0, 30*time.Hour, hosts[:1]), ca), t0, never
			},
			issuedServing: true, bundle: []string{"a"},
		},
		"a serving certificate signed by an unknown CA is replaced at once": {
			setup: func(f *fixture) (map[string][]byte, time.Time, func(*x509.Certificate) bool) {
				ca := f.ca("a", t0, 300*time.Hour)
				other := f.ca("other", t0, 300*time.Hour)
				return secretData(ca, f.leaf("l", other, t0, 30*time.Hour, hosts), ca), t0, never
			},
			issuedServing: true, bundle: []string{"a"},
		},
		"a CA past two thirds of its life is renewed; the old one stays trusted and keeps serving until the new one is trusted": {
			setup: func(f *fixture) (map[string][]byte, time.Time, func(*x509.Certificate) bool) {
				ca := f.ca("a", t0, 300*time.Hour)
				now := renewalTime(ca.cert)
				return secretData(ca, f.leaf("l", ca, now.Add(-time.Hour), 30*time.Hour, hosts), ca), now, never
			},
			issuedCA: true, deferred: true, bundle: []string{"new", "a"},
		},
		"a new CA trusted everywhere waits for the settle time": {
			setup: func(f *fixture) (map[string][]byte, time.Time, func(*x509.Certificate) bool) {
				oldCA := f.ca("a", t0, 300*time.Hour)
				newCA := f.ca("b", t0.Add(200*time.Hour), 300*time.Hour)
				leaf := f.leaf("l", oldCA, t0.Add(199*time.Hour), 30*time.Hour, hosts)
				return secretData(newCA, leaf, newCA, oldCA), t0.Add(200*time.Hour + caSettle/2), always
			},
			deferred: true, unchanged: true, bundle: []string{"b", "a"},
		},
		"a settled new CA trusted everywhere signs the next serving certificate": {
			setup: func(f *fixture) (map[string][]byte, time.Time, func(*x509.Certificate) bool) {
				oldCA := f.ca("a", t0, 300*time.Hour)
				newCA := f.ca("b", t0.Add(200*time.Hour), 300*time.Hour)
				leaf := f.leaf("l", oldCA, t0.Add(199*time.Hour), 30*time.Hour, hosts)
				return secretData(newCA, leaf, newCA, oldCA), t0.Add(200*time.Hour + caSettle), always
			},
			issuedServing: true, bundle: []string{"b", "a"},
		},
		"a new CA not trusted yet keeps the old serving certificate": {
			setup: func(f *fixture) (map[string][]byte, time.Time, func(*x509.Certificate) bool) {
				oldCA := f.ca("a", t0, 300*time.Hour)
				newCA := f.ca("b", t0.Add(200*time.Hour), 300*time.Hour)
				leaf := f.leaf("l", oldCA, t0.Add(199*time.Hour), 30*time.Hour, hosts)
				return secretData(newCA, leaf, newCA, oldCA), t0.Add(201 * time.Hour), never
			},
			deferred: true, unchanged: true, bundle: []string{"b", "a"},
		},
		"an expired serving certificate is replaced even before the new CA is trusted": {
			setup: func(f *fixture) (map[string][]byte, time.Time, func(*x509.Certificate) bool) {
				oldCA := f.ca("a", t0, 300*time.Hour)
				newCA := f.ca("b", t0.Add(200*time.Hour), 300*time.Hour)
				leaf := f.leaf("l", oldCA, t0.Add(100*time.Hour), 30*time.Hour, hosts)
				return secretData(newCA, leaf, newCA, oldCA), t0.Add(201 * time.Hour), never
			},
			issuedServing: true, bundle: []string{"b", "a"},
		},
		"an expired old CA leaves the bundle": {
			setup: func(f *fixture) (map[string][]byte, time.Time, func(*x509.Certificate) bool) {
				oldCA := f.ca("a", t0, 300*time.Hour)
				newCA := f.ca("b", t0.Add(200*time.Hour), 300*time.Hour)
				leaf := f.leaf("l", newCA, t0.Add(299*time.Hour), 30*time.Hour, hosts)
				return secretData(newCA, leaf, newCA, oldCA), t0.Add(301 * time.Hour), always
			},
			bundle: []string{"b"},
		},
		"a bundle that lost the current CA is rebuilt": {
			setup: func(f *fixture) (map[string][]byte, time.Time, func(*x509.Certificate) bool) {
				ca := f.ca("a", t0, 300*time.Hour)
				data := secretData(ca, f.leaf("l", ca, t0, 30*time.Hour, hosts))
				return data, t0, always
			},
			bundle: []string{"a"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			data, now, trusted := tc.setup(f)
			p, err := testIssuer().decide(data, now, trusted)
			if err != nil {
				t.Fatalf("decide: %v", err)
			}
			if p.issuedCA != tc.issuedCA || p.issuedServing != tc.issuedServing || p.deferred != tc.deferred {
				t.Errorf("issuedCA, issuedServing, deferred = %v, %v, %v; want %v, %v, %v",
					p.issuedCA, p.issuedServing, p.deferred, tc.issuedCA, tc.issuedServing, tc.deferred)
			}
			if (p.data == nil) != tc.unchanged {
				t.Errorf("Secret data changed = %v, want %v", p.data != nil, !tc.unchanged)
			}
			result := p.data
			if result == nil {
				result = data
			}

			// The bundle holds the expected CAs, in order.
			bundle, err := parseCerts(result[caBundleKey])
			if err != nil {
				t.Fatalf("bundle: %v", err)
			}
			var names []string
			for _, c := range bundle {
				name := "new"
				for n, ca := range f.cas {
					if ca.cert.Equal(c) {
						name = n
					}
				}
				names = append(names, name)
			}
			if len(names) != len(tc.bundle) {
				t.Fatalf("bundle holds %v, want %v", names, tc.bundle)
			}
			for i := range names {
				if names[i] != tc.bundle[i] {
					t.Fatalf("bundle holds %v, want %v", names, tc.bundle)
				}
			}
			if !bytes.Equal(p.bundle, result[caBundleKey]) {
				t.Error("plan's bundle differs from the Secret's")
			}

			// Whatever happened, what is served verifies with the bundle
			// at this instant, and covers every host.
			serving, err := verifyServing(result[certKey], result[keyKey], bundle, hosts, now)
			if err != nil {
				t.Fatalf("served certificate does not verify with the bundle: %v", err)
			}
			if !serving.Equal(p.serving) {
				t.Error("plan's serving certificate differs from the Secret's")
			}
			ca, err := parseCA(result[caCertKey], result[caKeyKey])
			if err != nil {
				t.Fatalf("CA: %v", err)
			}
			if !bundle[0].Equal(ca.cert) {
				t.Error("the bundle does not start with the current CA")
			}
			signedByCurrent := serving.CheckSignatureFrom(ca.cert) == nil
			if signedByCurrent == tc.deferred {
				t.Errorf("serving certificate signed by the current CA = %v with deferred = %v", signedByCurrent, tc.deferred)
			}
			if serving.NotAfter.After(ca.cert.NotAfter) {
				t.Error("serving certificate outlives its CA")
			}
			if !p.next.After(now) {
				t.Errorf("next check %v is not after now %v", p.next, now)
			}

			// Deciding again on the result at the same instant changes
			// nothing: the loop converges.
			again, err := testIssuer().decide(result, now, trusted)
			if err != nil {
				t.Fatal(err)
			}
			if again.data != nil {
				t.Error("a second decision on the result changes the Secret again")
			}
		})
	}
}

func TestDecideNeverLeavesAGapDuringACARotation(t *testing.T) {
	// Walk a whole CA lifetime and more in steps, with webhook
	// configurations that trust a bundle only one step after it was
	// written (as the rotator injects it after writing the Secret). At
	// every step the certificate served must verify with the bundle the
	// configurations hold.
	is := testIssuer()
	var data map[string][]byte
	var injected []byte
	trusted := func(ca *x509.Certificate) bool { return bundleHas(injected, ca) }
	cas := map[string]bool{}
	for now := t0; now.Before(t0.Add(1000 * time.Hour)); now = now.Add(time.Hour) {
		p, err := is.decide(data, now, trusted)
		if err != nil {
			t.Fatal(err)
		}
		if p.data != nil {
			data = p.data
		}
		cas[string(p.ca.Raw)] = true
		if injected != nil {
			roots, err := parseCerts(injected)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := verifyServing(data[certKey], data[keyKey], roots, hosts, now); err != nil {
				t.Fatalf("at %v the served certificate does not verify with the injected bundle: %v", now.Sub(t0), err)
			}
		}
		injected = p.bundle
	}
	if len(cas) < 4 {
		t.Errorf("only %d CAs in 1000h with a 300h CA validity: rotation did not run", len(cas))
	}
}

// BenchmarkDecideUnchanged measures the pass that runs on every watch event
// of the Secret or a webhook configuration when nothing is due.
func BenchmarkDecideUnchanged(b *testing.B) {
	is := testIssuer()
	p, err := is.decide(nil, t0, func(*x509.Certificate) bool { return true })
	if err != nil {
		b.Fatal(err)
	}
	trusted := func(ca *x509.Certificate) bool { return bundleHas(p.bundle, ca) }
	now := t0.Add(time.Hour)
	b.ReportAllocs()
	for b.Loop() {
		if q, err := is.decide(p.data, now, trusted); err != nil || q.data != nil {
			b.Fatalf("decide changed the data: %v", err)
		}
	}
}

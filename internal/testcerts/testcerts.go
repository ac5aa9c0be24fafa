// Package testcerts makes throwaway certificate authorities and certificates
// for tests of TLS and mTLS endpoints.
package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority that signs test certificates.
type CA struct {
	// CertPEM is the CA certificate, for trust bundles (caBundle, --client-ca).
	CertPEM []byte
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
}

// Pair is a signed certificate and its private key, PEM encoded.
type Pair struct {
	CertPEM, KeyPEM []byte
}

// TLS returns the pair as a certificate for a tls.Config.
func (p Pair) TLS() (tls.Certificate, error) { return tls.X509KeyPair(p.CertPEM, p.KeyPEM) }

// Pool returns a pool that trusts the CA.
func (ca *CA) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	return pool
}

// NewCA makes a CA valid for a day.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("self-sign CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse CA: %w", err)
	}
	return &CA{CertPEM: pemBlock("CERTIFICATE", der), cert: cert, key: key}, nil
}

// Server signs a serving certificate for the given DNS names and IP
// addresses (e.g. "localhost", "127.0.0.1").
func (ca *CA) Server(hosts ...string) (Pair, error) {
	tmpl := ca.template(hosts[0], x509.ExtKeyUsageServerAuth)
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return ca.sign(tmpl)
}

// Loopback makes a CA named name and a serving certificate it signed for
// 127.0.0.1 and localhost, what a test server on loopback needs.
func Loopback(name string) (*CA, Pair, error) {
	ca, err := NewCA(name)
	if err != nil {
		return nil, Pair{}, err
	}
	pair, err := ca.Server("127.0.0.1", "localhost")
	return ca, pair, err
}

// Client signs a client certificate with the given common name.
func (ca *CA) Client(commonName string) (Pair, error) {
	return ca.sign(ca.template(commonName, x509.ExtKeyUsageClientAuth))
}

// ClientFor signs a client certificate that names identity: as its URI SAN
// when it is a URI with a scheme (a SPIFFE ID), else as its DNS SAN; the
// common name is the identity too.
func (ca *CA) ClientFor(identity string) (Pair, error) {
	s := Subject{CommonName: identity}
	if u, err := url.Parse(identity); err == nil && u.Scheme != "" {
		s.URIs = []string{identity}
	} else {
		s.DNSNames = []string{identity}
	}
	return ca.ClientOf(s)
}

// Subject is what a client certificate names, and until when it is valid:
// for tests of how a server tells its callers apart, and of what it does
// when a certificate expires.
type Subject struct {
	// CommonName is the subject's CN; empty for none.
	CommonName string
	// URIs and DNSNames are its subject alternative names.
	URIs, DNSNames []string
	// NotAfter is when it expires; zero means a day from now.
	NotAfter time.Time
}

// ClientOf signs a client certificate that names exactly what s says.
func (ca *CA) ClientOf(s Subject) (Pair, error) {
	tmpl := ca.template(s.CommonName, x509.ExtKeyUsageClientAuth)
	for _, raw := range s.URIs {
		u, err := url.Parse(raw)
		if err != nil {
			return Pair{}, fmt.Errorf("URI SAN %q: %w", raw, err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	tmpl.DNSNames = s.DNSNames
	if !s.NotAfter.IsZero() {
		tmpl.NotAfter = s.NotAfter
	}
	return ca.sign(tmpl)
}

func (ca *CA) template(commonName string, usage x509.ExtKeyUsage) *x509.Certificate {
	if len(commonName) > 64 {
		// The longest common name X.509 allows; the SAN holds the rest.
		commonName = commonName[:64]
	}
	return &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: commonName},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
}

func (ca *CA) sign(tmpl *x509.Certificate) (Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, fmt.Errorf("generate key: %w", err)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return Pair{}, fmt.Errorf("sign certificate for %s: %w", tmpl.Subject.CommonName, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Pair{}, fmt.Errorf("encode key: %w", err)
	}
	return Pair{CertPEM: pemBlock("CERTIFICATE", der), KeyPEM: pemBlock("EC PRIVATE KEY", keyDER)}, nil
}

// WriteFiles writes the pair as dir/name.crt and dir/name.key and returns
// their paths.
func (p Pair) WriteFiles(dir, name string) (certFile, keyFile string, err error) {
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, p.CertPEM, 0o600); err != nil {
		return "", "", fmt.Errorf("write certificate: %w", err)
	}
	if err := os.WriteFile(keyFile, p.KeyPEM, 0o600); err != nil {
		return "", "", fmt.Errorf("write key: %w", err)
	}
	return certFile, keyFile, nil
}

// WriteCA writes the CA certificate as dir/name.crt and returns its path.
func (ca *CA) WriteCA(dir, name string) (string, error) {
	file := filepath.Join(dir, name+".crt")
	if err := os.WriteFile(file, ca.CertPEM, 0o600); err != nil {
		return "", fmt.Errorf("write CA certificate: %w", err)
	}
	return file, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		panic(fmt.Sprintf("read random serial: %v", err))
	}
	return n
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// MutualTLS returns a server configuration that presents pair and requires
// client certificates the CA signed (mTLS).
func (ca *CA) MutualTLS(pair Pair) (*tls.Config, error) {
	cert, err := pair.TLS()
	if err != nil {
		return nil, fmt.Errorf("load the serving certificate: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}, nil
}

// ClientTLS returns a client configuration that trusts the CA and presents
// a certificate it signs for identity (see ClientFor).
func (ca *CA) ClientTLS(identity string) (*tls.Config, error) {
	pair, err := ca.ClientFor(identity)
	if err != nil {
		return nil, err
	}
	cfg, err := ca.ClientConfig(pair)
	if err != nil {
		return nil, fmt.Errorf("the client certificate of %s: %w", identity, err)
	}
	return cfg, nil
}

// ClientConfig returns a client configuration that trusts the CA and
// presents pair.
func (ca *CA) ClientConfig(pair Pair) (*tls.Config, error) {
	cert, err := pair.TLS()
	if err != nil {
		return nil, fmt.Errorf("load the client certificate: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}, nil
}

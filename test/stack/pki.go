package stack

import (
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"

	"github.com/fencegate/fencegate/authority/authz"
	"github.com/fencegate/fencegate/internal/testcerts"
)

// TrustDomain is the SPIFFE trust domain of the stack's identities.
const TrustDomain = "fencegate.demo"

// ClusterIdentity is the identity of a cluster's client certificate.
func ClusterIdentity(cluster string) string {
	return "spiffe://" + TrustDomain + "/cluster/" + cluster
}

// OperatorIdentity is the identity of the operator's client certificate,
// which the fence commands (status, history, revoke, …) present.
const OperatorIdentity = "spiffe://" + TrustDomain + "/operator/oncall"

// Credentials are the files of one client certificate.
type Credentials struct {
	// Identity is what the certificate names (its URI SAN).
	Identity string
	// CertFile and KeyFile are the PEM certificate and key.
	CertFile, KeyFile string
}

// PKI is what an authority served with mTLS and an authorization file
// needs: one CA signs the authority's serving certificate and every
// client's.
type PKI struct {
	// Dir holds every file.
	Dir string
	// CAFile is the CA certificate: --client-ca of the authority,
	// --authority-ca of its clients.
	CAFile string
	// Server is the authority's serving certificate, for 127.0.0.1.
	Server Credentials
	// Operator is the operator's client certificate.
	Operator Credentials
	// AuthorizationFile binds each cluster's identity to its cluster and
	// makes the operator an operator.
	AuthorizationFile string

	ca *testcerts.CA
}

// newPKI writes a CA, the authority's certificate, the operator's and one
// per cluster, and the authorization file, into dir.
func newPKI(dir string, clusters []ClusterSpec) (*PKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("PKI directory: %w", err)
	}
	ca, err := testcerts.NewCA("fencegate stack CA")
	if err != nil {
		return nil, err
	}
	p := &PKI{Dir: dir, ca: ca}
	if p.CAFile, err = ca.WriteCA(dir, "ca"); err != nil {
		return nil, err
	}
	server, err := ca.Server("127.0.0.1", "localhost")
	if err != nil {
		return nil, err
	}
	if p.Server.CertFile, p.Server.KeyFile, err = server.WriteFiles(dir, "authority"); err != nil {
		return nil, err
	}
	if p.Operator, err = p.Client(OperatorIdentity, "operator"); err != nil {
		return nil, err
	}
	var names []string
	for _, c := range clusters {
		if _, err := p.Client(ClusterIdentity(c.Name), "cluster-"+c.Name); err != nil {
			return nil, err
		}
		names = append(names, c.Name)
	}
	p.AuthorizationFile = filepath.Join(dir, "authorization.yaml")
	if err := p.Authorize(names...); err != nil {
		return nil, err
	}
	return p, nil
}

// Authorize writes the authorization file anew: each named cluster's
// identity may act as that cluster, in every domain, and the operator is
// an operator; any other identity has no role. The authority reloads it.
func (p *PKI) Authorize(clusters ...string) error {
	file := authz.File{Operators: []string{OperatorIdentity}}
	for _, name := range clusters {
		file.Clusters = append(file.Clusters, authz.ClusterBinding{Identity: ClusterIdentity(name), Cluster: name, Domains: []string{authz.AllDomains}})
	}
	raw, err := yaml.Marshal(file)
	if err != nil {
		return fmt.Errorf("encode the authorization file: %w", err)
	}
	// A rename replaces the file at once: the authority never reads half
	// of it.
	tmp := p.AuthorizationFile + ".new"
	if err := os.WriteFile(tmp, raw, 0o600); err != nil {
		return fmt.Errorf("write the authorization file: %w", err)
	}
	if err := os.Rename(tmp, p.AuthorizationFile); err != nil {
		return fmt.Errorf("write the authorization file: %w", err)
	}
	return nil
}

// Client signs a client certificate for identity and writes it as
// name.crt and name.key.
func (p *PKI) Client(identity, name string) (Credentials, error) {
	pair, err := p.ca.ClientFor(identity)
	if err != nil {
		return Credentials{}, err
	}
	c := Credentials{Identity: identity}
	c.CertFile, c.KeyFile, err = pair.WriteFiles(p.Dir, name)
	return c, err
}

// Cluster returns the files of a cluster's client certificate.
func (p *PKI) Cluster(name string) Credentials {
	return Credentials{Identity: ClusterIdentity(name), CertFile: filepath.Join(p.Dir, "cluster-"+name+".crt"), KeyFile: filepath.Join(p.Dir, "cluster-"+name+".key")}
}

// TLS returns a client TLS configuration that reaches the authority as
// c's identity (with a certificate of its own for it).
func (p *PKI) TLS(c Credentials) (*tls.Config, error) { return p.ca.ClientTLS(c.Identity) }

// Flags are the flags with which a fencegate command reaches the authority
// as c.
func (p *PKI) Flags(c Credentials) []string {
	return []string{"--authority-ca", p.CAFile, "--authority-cert", c.CertFile, "--authority-key", c.KeyFile}
}

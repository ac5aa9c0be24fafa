package authz

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
)

// AllDomains in a cluster binding's domains means every domain.
const AllDomains = "*"

// The FenceService methods, by their full gRPC names.
const (
	MethodDeclare = fencev1.FenceService_DeclareClusterEpoch_FullMethodName
	MethodRelease = fencev1.FenceService_ReleaseFence_FullMethodName
	MethodGet     = fencev1.FenceService_GetFence_FullMethodName
	MethodWatch   = fencev1.FenceService_WatchFence_FullMethodName
	MethodRevoke  = fencev1.FenceService_RevokeFence_FullMethodName
	MethodForget  = fencev1.FenceService_ForgetCluster_FullMethodName
	MethodHistory = fencev1.FenceService_GetFenceHistory_FullMethodName
)

// The services every caller may use whatever its role.
const (
	healthService     = "/grpc.health.v1.Health/"
	reflectionService = "/grpc.reflection."
)

// File is the authorization file's content. Its identities are written
// uri:…, dns:… or cn:… (see PrefixURI, PrefixDNS, PrefixCN); one without a
// prefix is a URI, such as a SPIFFE ID.
type File struct {
	// Clusters bind identities to the one cluster each may act as.
	Clusters []ClusterBinding `json:"clusters,omitempty"`
	// Operators may read, watch, revoke, forget and read the history.
	Operators []string `json:"operators,omitempty"`
	// Readers may read, watch and read the history.
	Readers []string `json:"readers,omitempty"`
}

// ClusterBinding lets one identity declare, release and read as one cluster.
type ClusterBinding struct {
	// Identity is the caller's identity (see File).
	Identity string `json:"identity"`
	// Cluster is the cluster name it acts as.
	Cluster string `json:"cluster"`
	// Domains are the fence domains it may act in; "*" is every domain.
	Domains []string `json:"domains"`
}

// Policy is a checked authorization file, indexed by identity as
// Identities writes it.
type Policy struct {
	clusters  map[string]ClusterBinding
	operators map[string]bool
	readers   map[string]bool
	// replaced is closed when a Source puts a newer policy in force.
	replaced chan struct{}
}

// Parse reads an authorization file (YAML or JSON) strictly: unknown
// fields, an identity bound to two clusters, an identity without a prefix
// that is not an absolute URI, a cluster name or domain that is not a DNS
// label are errors that name the entry.
func Parse(data []byte) (*Policy, error) {
	var f File
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, fmt.Errorf("parse authorization file: %w", err)
	}
	return Compile(f)
}

// Compile checks f and indexes it.
func Compile(f File) (*Policy, error) {
	p := &Policy{clusters: map[string]ClusterBinding{}, operators: map[string]bool{}, readers: map[string]bool{}, replaced: make(chan struct{})}
	var errs []error
	for i, b := range f.Clusters {
		where := fmt.Sprintf("clusters[%d]", i)
		id, err := parseIdentity(b.Identity)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
		}
		if err := rpctypes.ValidateClusterName(b.Cluster); err != nil {
			errs = append(errs, fmt.Errorf("%s (%s): %w", where, b.Identity, err))
		}
		if len(b.Domains) == 0 {
			errs = append(errs, fmt.Errorf(`%s (%s): domains is empty: list the domains it may act in, or ["*"] for all`, where, b.Identity))
		}
		for _, d := range b.Domains {
			if d == AllDomains {
				continue
			}
			if err := rpctypes.ValidateDomain(d); err != nil {
				errs = append(errs, fmt.Errorf("%s (%s): %w", where, b.Identity, err))
			}
		}
		if id == "" {
			continue
		}
		if prev, dup := p.clusters[id]; dup {
			errs = append(errs, fmt.Errorf("%s: identity %q is bound to cluster %q already: an identity acts as one cluster only", where, b.Identity, prev.Cluster))
			continue
		}
		p.clusters[id] = b
	}
	for _, list := range []struct {
		name string
		ids  []string
		into map[string]bool
	}{{"operators", f.Operators, p.operators}, {"readers", f.Readers, p.readers}} {
		for i, written := range list.ids {
			id, err := parseIdentity(written)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s[%d]: %w", list.name, i, err))
				continue
			}
			list.into[id] = true
		}
	}
	for id := range p.clusters {
		if p.operators[id] {
			errs = append(errs, fmt.Errorf("identity %q is both a cluster and an operator: give the operator an identity of its own, so that its actions are told apart", id))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return p, nil
}

// Request is what the authorizer looks at in a call.
type Request struct {
	// Method is the full gRPC method.
	Method string
	// Domain is the (normalized) fence domain the call is about; empty for
	// calls that name none.
	Domain string
	// Cluster is the cluster the call acts as: the declaring or releasing
	// cluster's name.
	Cluster string
}

// Decision is the authorizer's answer.
type Decision struct {
	// Allowed is true when the call may proceed.
	Allowed bool
	// Reason says why a call is refused, in words an operator can act on.
	Reason string
}

func allow() Decision { return Decision{Allowed: true} }

func deny(format string, args ...any) Decision {
	return Decision{Reason: fmt.Sprintf(format, args...)}
}

// Replaced is closed once a Source puts a newer policy in force, so that
// what this one allowed (an open stream) is decided again; it stays open
// for a policy no Source holds.
func (p *Policy) Replaced() <-chan struct{} { return p.replaced }

// Decide picks, among the identities a caller's certificate names
// (Caller.Claims), the one the call is made as, and decides whether it may
// make the call r. That is the one claim the file names; a DNS SAN or a
// common name thus counts only where the file names it as dns:… or cn:….
// A certificate the file names no claim of is its first claim, without a
// role. One the file names two or more claims of is refused, rather than
// given the role of its URI SAN: the file then gives its holder two roles,
// and which one it meant is for the file to say, by naming one; a rule of
// precedence would hand out the wider role silently. Decide is a pure
// function of the policy, the claims and the request.
func (p *Policy) Decide(claims []string, r Request) (string, Decision) {
	var named []string
	for _, c := range claims {
		if p.names(c) {
			named = append(named, c)
		}
	}
	identity := ""
	switch {
	case len(named) > 0:
		identity = named[0]
	case len(claims) > 0:
		identity = claims[0]
	}
	if isHealth(r.Method) {
		return identity, allow()
	}
	switch {
	case len(named) > 1:
		return identity, deny("the client certificate names %d identities the authorization file names (%s): it must name one only, so that its role is plain; remove all but one from the file, or issue a certificate that names one", len(named), strings.Join(named, ", "))
	case len(named) == 0 && len(claims) > 1:
		return identity, deny("identity %q has no role in the authorization file, nor has any other identity the client certificate names (%s): bind one to a cluster, or list it as an operator or a reader; a DNS SAN counts only as dns:…, a common name only as cn:…", identity, strings.Join(claims[1:], ", "))
	}
	return identity, p.Authorize(identity, r)
}

// names reports whether the file gives identity a role.
func (p *Policy) names(identity string) bool {
	_, isCluster := p.clusters[identity]
	return isCluster || p.operators[identity] || p.readers[identity]
}

// Authorize decides whether identity, written as Identities writes it, may
// make the call r. It is a pure function of the policy, the identity and
// the request.
func (p *Policy) Authorize(identity string, r Request) Decision {
	if isHealth(r.Method) {
		// Health checking tells nothing about the fence.
		return allow()
	}
	if identity == "" {
		return deny("the call has no client identity: present a client certificate that the authority's client CA signed")
	}
	binding, isCluster := p.clusters[identity]
	isOperator, isReader := p.operators[identity], p.readers[identity]
	if !isCluster && !isOperator && !isReader {
		return deny("identity %q has no role in the authorization file: bind it to a cluster, or list it as an operator or a reader", identity)
	}
	method := shortMethod(r.Method)
	switch {
	case strings.HasPrefix(r.Method, reflectionService):
		return allow()
	case r.Method == MethodDeclare || r.Method == MethodRelease:
		switch {
		case !isCluster && isOperator && r.Method == MethodRelease:
			return deny("identity %q is an operator: an operator revokes leases (fencegate fence revoke) and never releases them; only the holder's own instances release theirs", identity)
		case !isCluster:
			return deny("identity %q is %s, not bound to a cluster: %s may be called only by a cluster's own identity", identity, roleNoun(isOperator), method)
		case r.Cluster == "":
			return deny("%s names no cluster_name: with authorization on, the call must name the cluster it acts as (%s)", method, binding.Cluster)
		case r.Cluster != binding.Cluster:
			return deny("identity %q may act only as cluster %s; this call %s %s", identity, binding.Cluster, verb(r.Method), r.Cluster)
		case !binding.allows(r.Domain):
			return deny("identity %q may act as cluster %s only in domains %s; this call is in domain %q", identity, binding.Cluster, strings.Join(binding.Domains, ", "), r.Domain)
		}
		return allow()
	case r.Method == MethodGet || r.Method == MethodWatch:
		if isOperator || isReader || binding.allows(r.Domain) {
			return allow()
		}
		return deny("identity %q may act as cluster %s only in domains %s; this call reads domain %q", identity, binding.Cluster, strings.Join(binding.Domains, ", "), r.Domain)
	case r.Method == MethodHistory:
		if isOperator || isReader {
			return allow()
		}
		return deny("identity %q is bound to cluster %s, which may declare, release and read its fence; %s needs an operator or a reader", identity, binding.Cluster, method)
	case r.Method == MethodRevoke || r.Method == MethodForget:
		if isOperator {
			return allow()
		}
		if isCluster {
			return deny("identity %q is bound to cluster %s, which may declare, release and read its fence; %s needs an operator", identity, binding.Cluster, method)
		}
		return deny("identity %q is a reader: it may read, watch and read the history; %s needs an operator", identity, method)
	}
	return deny("method %s is not part of the fence protocol this authority authorizes", r.Method)
}

// isHealth reports whether method is health checking, which every caller
// may use.
func isHealth(method string) bool { return strings.HasPrefix(method, healthService) }

// allows reports whether the binding covers domain.
func (b ClusterBinding) allows(domain string) bool {
	return slices.Contains(b.Domains, AllDomains) || slices.Contains(b.Domains, domain)
}

func roleNoun(operator bool) string {
	if operator {
		return "an operator"
	}
	return "a reader"
}

func verb(method string) string {
	if method == MethodRelease {
		return "releases the fence of"
	}
	return "declares"
}

// shortMethod is the method's name without its service, for messages and
// metric labels.
func shortMethod(method string) string {
	if i := strings.LastIndexByte(method, '/'); i >= 0 {
		return method[i+1:]
	}
	return method
}

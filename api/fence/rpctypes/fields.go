package rpctypes

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation"
)

// DefaultDomain is the domain of requests that name none.
const DefaultDomain = "default"

// FailoverCommand is the `fencegate failover` command line that moves the
// fence of domain to cluster: it names the domain only where it is not the
// default, which the command picks when none is given. Messages that tell
// a person to fail over quote it.
func FailoverCommand(domain, cluster string) string {
	if domain == DefaultDomain || domain == "" {
		return "fencegate failover --to " + cluster
	}
	return "fencegate failover --domain " + domain + " --to " + cluster
}

// The request fields with rules, by their names in the gRPC API.
const (
	FieldDomain      = "domain"
	FieldClusterName = "cluster_name"
	FieldClusterUID  = "cluster_uid"
	FieldEpoch       = "epoch"
	FieldInstance    = "instance"
)

// MaxUIDLength bounds cluster UIDs (a Kubernetes UID has 36 characters), so
// one request cannot inflate a stored record.
const MaxUIDLength = 128

// MaxInstanceLength bounds instance names: a pod name (a DNS subdomain) has
// at most 253 characters.
const MaxInstanceLength = 253

// FieldError says which request field is wrong and why. Field is the
// field's name in the gRPC API, so clients can point at it.
type FieldError struct {
	Field   string
	Problem string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Problem }

// Describe names the field for a person ("cluster name", "instance name")
// followed by the problem, for messages about settings rather than RPCs.
func (e *FieldError) Describe() string {
	noun, ok := map[string]string{
		FieldDomain:      "fence domain",
		FieldClusterName: "cluster name",
		FieldClusterUID:  "cluster UID",
		FieldEpoch:       "epoch",
		FieldInstance:    "instance name",
	}[e.Field]
	if !ok {
		noun = e.Field
	}
	return noun + " " + e.Problem
}

// NormalizeDomain returns the domain a request means: empty is
// DefaultDomain.
func NormalizeDomain(domain string) string {
	if domain == "" {
		return DefaultDomain
	}
	return domain
}

// ValidateDomain checks a normalized domain: a DNS label, like cluster
// names, so that it is safe in etcd keys, metrics and messages.
func ValidateDomain(domain string) error { return dnsLabel(FieldDomain, domain) }

// ValidateClusterName checks a cluster name: a DNS label (RFC 1123).
func ValidateClusterName(name string) error { return dnsLabel(FieldClusterName, name) }

// ValidateClusterUID checks a cluster UID (the UID of the cluster's
// kube-system Namespace): not empty, bounded, printable.
func ValidateClusterUID(uid string) error {
	switch {
	case uid == "":
		return &FieldError{Field: FieldClusterUID, Problem: "is empty (it is the UID of the cluster's kube-system Namespace)"}
	case len(uid) > MaxUIDLength:
		return &FieldError{Field: FieldClusterUID, Problem: fmt.Sprintf("is %d characters long, more than the %d allowed", len(uid), MaxUIDLength)}
	case hasSpaceOrControl(uid):
		return &FieldError{Field: FieldClusterUID, Problem: fmt.Sprintf("%q contains spaces or control characters", uid)}
	}
	return nil
}

// ValidateEpoch checks an epoch: epochs start at 1, so that an unset value
// is never mistaken for a real one.
func ValidateEpoch(epoch uint64) error {
	if epoch == 0 {
		return &FieldError{Field: FieldEpoch, Problem: "is 0: epochs start at 1"}
	}
	return nil
}

// ValidateInstance checks an instance name. It may be empty (the instance
// of clients that name none), but it is kept in the record and shown in
// messages, so it is bounded and printable.
func ValidateInstance(instance string) error {
	switch {
	case len(instance) > MaxInstanceLength:
		return &FieldError{Field: FieldInstance, Problem: fmt.Sprintf("is %d characters long, more than the %d allowed", len(instance), MaxInstanceLength)}
	case !utf8.ValidString(instance):
		return &FieldError{Field: FieldInstance, Problem: fmt.Sprintf("%q is not valid UTF-8", instance)}
	case hasSpaceOrControl(instance):
		return &FieldError{Field: FieldInstance, Problem: fmt.Sprintf("%q contains spaces or control characters", instance)}
	}
	return nil
}

func dnsLabel(field, value string) error {
	if value == "" {
		return &FieldError{Field: field, Problem: "is empty"}
	}
	if problems := validation.IsDNS1123Label(value); len(problems) > 0 {
		return &FieldError{Field: field, Problem: fmt.Sprintf("%q is not a DNS label: %s", value, strings.Join(problems, "; "))}
	}
	return nil
}

// hasSpaceOrControl reports whether s has a space, a control character or
// DEL, none of which belong in a UID or an instance name.
func hasSpaceOrControl(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f })
}

package statemachine

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation"
)

// maxUIDLength bounds cluster UIDs (a Kubernetes UID has 36 characters) so
// a stored record cannot be inflated by one request.
const maxUIDLength = 128

// maxInstanceLength bounds instance names: a pod name (a DNS subdomain) has
// at most 253 characters.
const maxInstanceLength = 253

// Declaration is a DeclareClusterEpoch request.
type Declaration struct {
	// Domain names the fence; empty means DefaultDomain.
	Domain string
	// Cluster is the declaring cluster.
	Cluster Identity
	// Epoch is the epoch it declares.
	Epoch uint64
	// Instance names the declaring process within the cluster (its pod
	// name, say); each instance has its own lease. Empty is an instance
	// too: the one of clients that do not name theirs.
	Instance string
}

// Release is a ReleaseFence request.
type Release struct {
	// Domain names the fence; empty means DefaultDomain.
	Domain string
	// ClusterUID is the releasing cluster's UID; it must be the holder's.
	ClusterUID string
	// Epoch must not be below the epoch the instance last declared.
	Epoch uint64
	// Instance is the releasing instance of the holder; only its lease is
	// released.
	Instance string
}

// FieldError says which request field is wrong and why. Field is the
// field's name in the gRPC API, so clients can point at it.
type FieldError struct {
	Field   string
	Problem string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Problem }

// Normalize returns the domain a request means: empty is DefaultDomain.
func Normalize(domain string) string {
	if domain == "" {
		return DefaultDomain
	}
	return domain
}

// ValidateDomain checks a (normalized) domain name: a DNS label, like
// cluster names, so it is safe in keys, metrics and messages.
func ValidateDomain(domain string) error {
	return dnsLabel("domain", domain)
}

// Validate checks every field of d and returns a *FieldError for the first
// bad one. Its domain must already be normalized.
func (d Declaration) Validate() error {
	if err := ValidateDomain(d.Domain); err != nil {
		return err
	}
	if err := dnsLabel("cluster_name", d.Cluster.Name); err != nil {
		return err
	}
	if err := validUID(d.Cluster.UID); err != nil {
		return err
	}
	if err := validEpoch(d.Epoch); err != nil {
		return err
	}
	return validInstance(d.Instance)
}

// Validate checks every field of r and returns a *FieldError for the first
// bad one. Its domain must already be normalized.
func (r Release) Validate() error {
	if err := ValidateDomain(r.Domain); err != nil {
		return err
	}
	if err := validUID(r.ClusterUID); err != nil {
		return err
	}
	if err := validEpoch(r.Epoch); err != nil {
		return err
	}
	return validInstance(r.Instance)
}

func dnsLabel(field, value string) error {
	if value == "" {
		return &FieldError{Field: field, Problem: "must not be empty"}
	}
	if problems := validation.IsDNS1123Label(value); len(problems) > 0 {
		return &FieldError{Field: field, Problem: fmt.Sprintf("%q is not a DNS label: %s", value, strings.Join(problems, "; "))}
	}
	return nil
}

func validUID(uid string) error {
	switch {
	case uid == "":
		return &FieldError{Field: "cluster_uid", Problem: "must not be empty (it is the UID of the cluster's kube-system Namespace)"}
	case len(uid) > maxUIDLength:
		return &FieldError{Field: "cluster_uid", Problem: fmt.Sprintf("is %d characters long, more than the %d allowed", len(uid), maxUIDLength)}
	case hasSpaceOrControl(uid):
		return &FieldError{Field: "cluster_uid", Problem: fmt.Sprintf("%q contains spaces or control characters", uid)}
	}
	return nil
}

// validInstance checks an instance name: it may be empty, but it is kept in
// the record and shown in messages, so it is bounded and printable.
func validInstance(instance string) error {
	switch {
	case len(instance) > maxInstanceLength:
		return &FieldError{Field: "instance", Problem: fmt.Sprintf("is %d characters long, more than the %d allowed", len(instance), maxInstanceLength)}
	case !utf8.ValidString(instance):
		return &FieldError{Field: "instance", Problem: fmt.Sprintf("%q is not valid UTF-8", instance)}
	case hasSpaceOrControl(instance):
		return &FieldError{Field: "instance", Problem: fmt.Sprintf("%q contains spaces or control characters", instance)}
	}
	return nil
}

// hasSpaceOrControl reports whether s has a space, a control character or
// DEL, none of which belong in a UID or an instance name.
func hasSpaceOrControl(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f })
}

func validEpoch(epoch uint64) error {
	if epoch == 0 {
		return &FieldError{Field: "epoch", Problem: "must be at least 1"}
	}
	return nil
}

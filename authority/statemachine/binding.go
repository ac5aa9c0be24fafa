package statemachine

import (
	"maps"
	"slices"
)

// CheckBinding decides whether cluster id may join a domain whose record
// does not know its UID yet, given the name the UID is recorded under in
// each domain that knows it (recorded, by domain). A UID is bound to one
// name in every domain, not only in those it declared in: otherwise a
// cluster could declare another cluster's UID, under its own name, in a
// domain the other has not joined yet, and lock the other out of that
// domain. It returns nil when no domain records the UID under another name,
// else a *BindingError naming the bound name and the domains that record
// it (the first such domain's name, when older records disagree).
func CheckBinding(id Identity, recorded map[string]string) error {
	var refusal *BindingError
	for _, domain := range slices.Sorted(maps.Keys(recorded)) {
		switch name := recorded[domain]; {
		case name == id.Name:
		case refusal == nil:
			refusal = &BindingError{UID: id.UID, Declared: id.Name, Bound: name, Domains: []string{domain}}
		case name == refusal.Bound:
			refusal.Domains = append(refusal.Domains, domain)
		}
	}
	if refusal == nil {
		return nil
	}
	return refusal
}

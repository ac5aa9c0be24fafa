package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"

	"sigs.k8s.io/yaml"
)

// The keys of data.fencegate.config that the shipped policies read. Other
// keys are kept for policies of the operator's own.
const (
	configEnforcement      = "enforcement"
	configExemptUsers      = "exempt_users"
	configExemptGroups     = "exempt_groups"
	configExemptNamespaces = "exempt_namespaces"
	configControllerUsers  = "controller_users"
	configFencedKinds      = "fenced_kinds"
)

// Enforcement modes of data.fencegate.config.enforcement.
var enforcementModes = []string{"deny", "warn", "dryrun"}

// nameListKeys are the config keys that hold lists of names; knownConfigKeys
// all the keys the shipped policies read.
var (
	nameListKeys    = []string{configExemptUsers, configExemptGroups, configExemptNamespaces, configControllerUsers}
	knownConfigKeys = append([]string{configEnforcement, configFencedKinds}, nameListKeys...)
)

// loadConfig reads the config files (YAML or JSON objects) into the value of
// data.fencegate.config. Later files override the keys of earlier ones. It
// returns the merged object and the names of keys the shipped policies do
// not read, so that a misspelt setting can be pointed out.
func loadConfig(files []string) (map[string]any, []string, error) {
	config := map[string]any{}
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			return nil, nil, fmt.Errorf("read config file: %w", err)
		}
		values, err := parseConfig(raw)
		if err != nil {
			return nil, nil, fmt.Errorf("config file %s: %w", file, err)
		}
		for k, v := range values {
			config[k] = v
		}
	}
	var unknown []string
	for k := range config {
		if !slices.Contains(knownConfigKeys, k) {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	return config, unknown, nil
}

// parseConfig decodes and checks one config document.
func parseConfig(raw []byte) (map[string]any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return map[string]any{}, nil
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("not valid YAML or JSON: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("not valid YAML or JSON: %w", err)
	}
	values, ok := doc.(map[string]any)
	if !ok {
		if doc == nil {
			return map[string]any{}, nil
		}
		return nil, fmt.Errorf("want an object of settings (enforcement, exempt_users, ...), got %s", jsonKind(doc))
	}
	if err := checkConfig(values); err != nil {
		return nil, err
	}
	return values, nil
}

// checkConfig checks the settings the shipped policies read. The policies
// would treat a wrong value as the safe default; refusing it here tells the
// operator instead.
func checkConfig(values map[string]any) error {
	var errs []error
	if v, ok := values[configEnforcement]; ok {
		mode, isString := v.(string)
		if !isString || !slices.Contains(enforcementModes, mode) {
			errs = append(errs, fmt.Errorf("%s: want one of deny, warn or dryrun, got %s", configEnforcement, jsonText(v)))
		}
	}
	for _, key := range nameListKeys {
		v, ok := values[key]
		if !ok || v == nil {
			continue
		}
		list, isList := v.([]any)
		if !isList {
			errs = append(errs, fmt.Errorf("%s: want a list of names, got %s", key, jsonKind(v)))
			continue
		}
		for i, item := range list {
			if s, isString := item.(string); !isString || s == "" {
				errs = append(errs, fmt.Errorf("%s[%d]: want a non-empty name, got %s", key, i, jsonText(item)))
			}
		}
	}
	errs = append(errs, checkFencedKinds(values[configFencedKinds])...)
	return errors.Join(errs...)
}

// checkFencedKinds checks fenced_kinds: a list of {"group", "kind"}, the
// group "" (or left out) for the core API group.
func checkFencedKinds(v any) []error {
	if v == nil {
		return nil
	}
	list, isList := v.([]any)
	if !isList {
		return []error{fmt.Errorf("%s: want a list of {group, kind}, got %s", configFencedKinds, jsonKind(v))}
	}
	var errs []error
	for i, item := range list {
		k, isObject := item.(map[string]any)
		kind, hasKind := k["kind"].(string)
		group, hasGroup := k["group"].(string)
		switch {
		case !isObject:
			errs = append(errs, fmt.Errorf("%s[%d]: want {group, kind}, got %s", configFencedKinds, i, jsonText(item)))
		case !hasKind || kind == "":
			errs = append(errs, fmt.Errorf("%s[%d].kind: want a kind such as CronJob, got %s", configFencedKinds, i, jsonText(k["kind"])))
		case !hasGroup && k["group"] != nil:
			errs = append(errs, fmt.Errorf("%s[%d].group: want an API group such as batch (\"\" for the core group), got %s", configFencedKinds, i, jsonText(k["group"])))
		case group == "components.fencegate.dev" && kind == "Component":
			errs = append(errs, fmt.Errorf("%s[%d]: Components are always fenced: leave them out", configFencedKinds, i))
		}
	}
	return errs
}

// jsonKind names the JSON type of a decoded value, for error messages.
func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	default:
		return fmt.Sprintf("%T", v)
	}
}

// jsonText renders a decoded value as JSON, for error messages.
func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

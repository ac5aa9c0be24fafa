package cluster

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// auditPolicy records every request once it has been answered, at the
// Metadata level: who did what to which object, and the answer's code.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
`

// AuditEvent is one request in a control plane's audit log (the fields of
// audit.k8s.io/v1 Event that tests read).
type AuditEvent struct {
	Verb string `json:"verb"`
	User struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef struct {
		Resource    string `json:"resource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	RequestReceived time.Time `json:"requestReceivedTimestamp"`
}

// Mutating says whether the request asked to change something.
func (e AuditEvent) Mutating() bool {
	switch e.Verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

// auditFlags makes the API server log every request to dir/audit.log.
func auditFlags(env *envtest.Environment, dir string) (string, error) {
	policy, log := filepath.Join(dir, "audit-policy.yaml"), filepath.Join(dir, "audit.log")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		return "", fmt.Errorf("write the audit policy: %w", err)
	}
	args := env.ControlPlane.GetAPIServer().Configure()
	args.Set("audit-policy-file", policy)
	args.Set("audit-log-path", log)
	args.Set("audit-log-format", "json")
	// Written as each request ends, so that a test reads what was done.
	args.Set("audit-log-mode", "blocking")
	return log, nil
}

// AuditEvents reads the control plane's audit log (Options.AuditLog).
func (cp *ControlPlane) AuditEvents() ([]AuditEvent, error) {
	if cp.auditLog == "" {
		return nil, fmt.Errorf("control plane %q keeps no audit log (Options.AuditLog)", cp.Name)
	}
	f, err := os.Open(cp.auditLog)
	if err != nil {
		return nil, fmt.Errorf("control plane %q: its audit log: %w", cp.Name, err)
	}
	defer func() { _ = f.Close() }()
	var events []AuditEvent
	lines := bufio.NewScanner(f)
	lines.Buffer(make([]byte, 1<<20), 16<<20)
	for lines.Scan() {
		var e AuditEvent
		if err := json.Unmarshal(lines.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("control plane %q: its audit log: %w", cp.Name, err)
		}
		events = append(events, e)
	}
	if err := lines.Err(); err != nil {
		return nil, fmt.Errorf("control plane %q: its audit log: %w", cp.Name, err)
	}
	return events, nil
}

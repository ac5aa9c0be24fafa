package rpctypes

import (
	"errors"
	"strings"
	"testing"
)

func TestFieldRules(t *testing.T) {
	tests := map[string]struct {
		check func() error
		// wantField is the field a refusal names; empty means accepted.
		wantField string
		// wantProblem is part of what the refusal says.
		wantProblem string
	}{
		"domain: a DNS label":             {check: func() error { return ValidateDomain("payments") }},
		"domain: empty":                   {check: func() error { return ValidateDomain("") }, wantField: FieldDomain, wantProblem: "is empty"},
		"domain: dots":                    {check: func() error { return ValidateDomain("prod.fence") }, wantField: FieldDomain, wantProblem: `"prod.fence" is not a DNS label`},
		"cluster name: 63 characters":     {check: func() error { return ValidateClusterName(strings.Repeat("a", 63)) }},
		"cluster name: 64 characters":     {check: func() error { return ValidateClusterName(strings.Repeat("a", 64)) }, wantField: FieldClusterName, wantProblem: "no more than 63"},
		"cluster name: upper case":        {check: func() error { return ValidateClusterName("East") }, wantField: FieldClusterName, wantProblem: "lower case"},
		"cluster name: leading hyphen":    {check: func() error { return ValidateClusterName("-east") }, wantField: FieldClusterName, wantProblem: "start and end with an alphanumeric"},
		"cluster uid: a Kubernetes UID":   {check: func() error { return ValidateClusterUID("2b1f0c4e-9d1e-4c55-8a51-6f7c3c9b1a2d") }},
		"cluster uid: empty":              {check: func() error { return ValidateClusterUID("") }, wantField: FieldClusterUID, wantProblem: "kube-system"},
		"cluster uid: 129 characters":     {check: func() error { return ValidateClusterUID(strings.Repeat("u", 129)) }, wantField: FieldClusterUID, wantProblem: "129 characters long, more than the 128"},
		"cluster uid: a space":            {check: func() error { return ValidateClusterUID("a b") }, wantField: FieldClusterUID, wantProblem: "spaces or control characters"},
		"cluster uid: DEL":                {check: func() error { return ValidateClusterUID("a\x7f") }, wantField: FieldClusterUID, wantProblem: "spaces or control characters"},
		"epoch: 1":                        {check: func() error { return ValidateEpoch(1) }},
		"epoch: the top":                  {check: func() error { return ValidateEpoch(^uint64(0)) }},
		"epoch: 0":                        {check: func() error { return ValidateEpoch(0) }, wantField: FieldEpoch, wantProblem: "epochs start at 1"},
		"instance: empty is an instance":  {check: func() error { return ValidateInstance("") }},
		"instance: a pod name":            {check: func() error { return ValidateInstance("fencegate-5c7d9f8b6-q2w4e") }},
		"instance: 254 characters":        {check: func() error { return ValidateInstance(strings.Repeat("p", 254)) }, wantField: FieldInstance, wantProblem: "254 characters long"},
		"instance: a newline":             {check: func() error { return ValidateInstance("a\nb") }, wantField: FieldInstance, wantProblem: "control characters"},
		"instance: not UTF-8":             {check: func() error { return ValidateInstance("\xff") }, wantField: FieldInstance, wantProblem: "not valid UTF-8"},
		"instance: non-ASCII is accepted": {check: func() error { return ValidateInstance("pod-ü") }},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := tc.check()
			if tc.wantField == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v (%T) is not a *FieldError", err, err)
			}
			if fe.Field != tc.wantField || !strings.Contains(fe.Problem, tc.wantProblem) {
				t.Errorf("refusal %q: want field %s and a problem saying %q", err, tc.wantField, tc.wantProblem)
			}
			if !strings.HasPrefix(err.Error(), tc.wantField+": ") {
				t.Errorf("Error() = %q: want it to start with the field", err)
			}
		})
	}
}

func TestDescribeNamesTheSetting(t *testing.T) {
	tests := map[string]struct {
		err  error
		want string
	}{
		"cluster name": {err: ValidateClusterName("East_1"), want: `cluster name "East_1" is not a DNS label`},
		"instance":     {err: ValidateInstance("pod 1"), want: `instance name "pod 1" contains spaces`},
		"epoch":        {err: ValidateEpoch(0), want: "epoch is 0"},
		"domain":       {err: ValidateDomain("Payments!"), want: `fence domain "Payments!" is not a DNS label`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var fe *FieldError
			if !errors.As(tc.err, &fe) {
				t.Fatalf("%v is not a *FieldError", tc.err)
			}
			if got := fe.Describe(); !strings.HasPrefix(got, tc.want) {
				t.Errorf("Describe() = %q, want it to start with %q", got, tc.want)
			}
		})
	}
}

func TestResultLabel(t *testing.T) {
	tests := map[string]string{
		ReasonClusterFenced:     "fenced",
		ReasonEpochRegressed:    "epoch_regressed",
		ReasonAcquiring:         "acquiring",
		ReasonPermissionDenied:  "permission_denied",
		ReasonEpochStepTooLarge: "epoch_step_too_large",
	}
	for reason, want := range tests {
		if got := ResultLabel(reason); got != want {
			t.Errorf("ResultLabel(%s) = %q, want %q", reason, got, want)
		}
	}
}

func TestFailoverCommand(t *testing.T) {
	tests := map[string]struct {
		domain, cluster, want string
	}{
		"the default domain is not named": {domain: DefaultDomain, cluster: "west", want: "fencegate failover --to west"},
		"no domain is the default":        {cluster: "west", want: "fencegate failover --to west"},
		"another domain is named":         {domain: "payments", cluster: "west", want: "fencegate failover --domain payments --to west"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := FailoverCommand(tc.domain, tc.cluster); got != tc.want {
				t.Errorf("FailoverCommand(%q, %q) = %q, want %q", tc.domain, tc.cluster, got, tc.want)
			}
		})
	}
}

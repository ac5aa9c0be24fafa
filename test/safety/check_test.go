package safety

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fencestate"
)

// admitted is an admission that broke no rule of its own: decided while
// active, as holder, stamped with the fence's token. Times are in
// milliseconds.
func admitted(pod string, token uint64, start, end float64) Admission {
	cluster := strings.Split(pod, "/")[0] + "-uid"
	return Admission{
		Pod: pod, Cluster: cluster, Token: token,
		Start: time.Duration(start * float64(time.Millisecond)), End: time.Duration(end * float64(time.Millisecond)),
		Status: fencestate.Active, Holder: cluster, FenceToken: token,
	}
}

// in puts an admission in domain d, decided by that domain's fence.
func in(d string, a Admission) Admission {
	a.Domain, a.FenceDomain = d, d
	return a
}

func TestCheck(t *testing.T) {
	fenced := admitted("east/1", 10, 0, 1)
	fenced.Status = fencestate.Fenced
	otherHolder := admitted("east/1", 10, 0, 1)
	otherHolder.Holder = "west-uid"
	noToken := admitted("east/1", 0, 0, 1)
	stampDiffers := admitted("east/1", 10, 0, 1)
	stampDiffers.FenceToken = 11
	otherDomain := in("payments", admitted("east/1", 10, 0, 1))
	otherDomain.FenceDomain = "search"
	lateCommit := admitted("east/1", 30, 4, 5)
	lateCommit.Asserted = 10
	onTime := admitted("east/1", 30, 4, 5)
	onTime.Asserted = 30

	tests := map[string]struct {
		admissions []Admission
		want       []string // rules broken, in the report's order
		handovers  int
		inFlight   int
	}{
		"nothing admitted": {},
		"a write decided under an earlier hold of the same cluster is admitted": {
			admissions: []Admission{admitted("east/1", 10, 0, 1), lateCommit},
			want:       []string{RuleLateCommit},
		},
		"a write decided under the token still current": {
			admissions: []Admission{admitted("east/1", 30, 0, 1), onTime},
		},
		"one holder": {
			admissions: []Admission{admitted("east/1", 10, 0, 1), admitted("east/2", 10, 0.5, 2), admitted("east/1", 10, 3, 4)},
		},
		"a handover: the old holder stops before the new one admits": {
			admissions: []Admission{admitted("east/1", 10, 0, 1), admitted("east/1", 10, 5, 6), admitted("west/1", 20, 10, 11)},
			handovers:  1,
		},
		"the fence moves away and back": {
			admissions: []Admission{admitted("east/1", 10, 0, 1), admitted("west/1", 20, 2, 3), admitted("east/2", 30, 4, 5)},
			handovers:  2,
		},
		"an Admit of the old holder still in flight when the new holder admits": {
			admissions: []Admission{admitted("east/1", 10, 0, 15), admitted("west/1", 20, 10, 11)},
			handovers:  1,
			inFlight:   1,
		},
		"the old holder admits again after the new holder admitted": {
			admissions: []Admission{admitted("east/1", 10, 0, 1), admitted("west/1", 20, 2, 3), admitted("east/1", 10, 4, 5)},
			want:       []string{RuleOverlap},
			handovers:  1,
			inFlight:   1,
		},
		"the old holder's only admission comes after the new holder's": {
			admissions: []Admission{admitted("west/1", 20, 2, 3), admitted("east/1", 10, 3.001, 3.002)},
			want:       []string{RuleOverlap},
			handovers:  1,
			inFlight:   1,
		},
		"a third cluster's admission is out of order with the first": {
			admissions: []Admission{admitted("east/1", 10, 0, 1), admitted("west/1", 20, 2, 3), admitted("north/1", 30, 4, 5), admitted("east/1", 10, 6, 7)},
			want:       []string{RuleOverlap, RuleOverlap},
			handovers:  2,
			inFlight:   1,
		},
		"an old pod admits with an older token after its cluster's new token": {
			admissions: []Admission{admitted("east/2", 30, 1, 2), admitted("east/1", 10, 5, 6)},
			want:       []string{RuleTokenRegressed},
		},
		"two clusters share a token": {
			admissions: []Admission{admitted("east/1", 10, 0, 1), admitted("west/1", 10, 5, 6)},
			want:       []string{RuleSharedToken},
		},
		"admitted while fenced":               {admissions: []Admission{fenced}, want: []string{RuleNotHolding}},
		"admitted while another cluster held": {admissions: []Admission{otherHolder}, want: []string{RuleNotHolding}},
		"admitted without a token":            {admissions: []Admission{noToken}, want: []string{RuleNotHolding}},
		"stamped with another token":          {admissions: []Admission{stampDiffers}, want: []string{RuleStamp}},
		"two domains with opposite holders admit at once": {
			admissions: []Admission{
				in("payments", admitted("east/1", 10, 0, 5)), in("search", admitted("west/1", 20, 0, 5)),
				in("payments", admitted("east/2", 10, 6, 7)), in("search", admitted("west/2", 20, 6, 7)),
			},
		},
		"one domain overlaps beside a safe one": {
			admissions: []Admission{
				in("payments", admitted("east/1", 10, 0, 1)), in("payments", admitted("west/1", 20, 2, 3)), in("payments", admitted("east/1", 10, 4, 5)),
				in("search", admitted("west/1", 30, 0, 9)),
			},
			want:      []string{RuleOverlap},
			handovers: 1,
			inFlight:  1,
		},
		"tokens are compared within a domain only": {
			admissions: []Admission{in("payments", admitted("east/1", 30, 0, 1)), in("search", admitted("east/1", 10, 5, 6))},
		},
		"decided by another domain's fence": {admissions: []Admission{otherDomain}, want: []string{RuleOtherDomain}},
		"violations are capped per rule": {
			admissions: func() []Admission {
				out := []Admission{admitted("west/1", 20, 0, 1)}
				for range 2 * maxPerRule {
					out = append(out, admitted("east/1", 10, 2, 3), fenced)
				}
				return out
			}(),
			want:      append(slices.Repeat([]string{RuleNotHolding}, maxPerRule), RuleOverlap),
			handovers: 1,
			inFlight:  1,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := Check(tc.admissions)
			var got []string
			for _, v := range r.Violations {
				got = append(got, v.Rule)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("violations = %v, want rules %v", r.Violations, tc.want)
			}
			if r.Admissions != len(tc.admissions) || r.Handovers != tc.handovers || r.InFlight != tc.inFlight {
				t.Errorf("report = %d admissions, %d handovers, %d in flight; want %d, %d, %d",
					r.Admissions, r.Handovers, r.InFlight, len(tc.admissions), tc.handovers, tc.inFlight)
			}
		})
	}
}

func TestCheckNamesTheAdmissions(t *testing.T) {
	const overlap = "east/1 token 10 in [0.004000s, 0.005000s] began after west/1 token 20 in [0.002000s, 0.003000s] had ended: " +
		"cluster east-uid admitted with token 10 after cluster west-uid took the fence over with token 20"
	tests := map[string]struct {
		domain string
		want   string
	}{
		"one unnamed domain":          {want: overlap},
		"the domain prefixes details": {domain: "payments", want: "domain payments: " + overlap},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := Check([]Admission{
				in(tc.domain, admitted("east/1", 10, 0, 1)), in(tc.domain, admitted("west/1", 20, 2, 3)), in(tc.domain, admitted("east/1", 10, 4, 5)),
			})
			if len(r.Violations) != 1 {
				t.Fatalf("violations = %v, want one", r.Violations)
			}
			if got := r.Violations[0].Detail; got != tc.want {
				t.Errorf("detail = %q\nwant     %q", got, tc.want)
			}
		})
	}
}

func TestHistoryWrite(t *testing.T) {
	h := History{
		Seed:   42,
		Events: []Event{{At: 0, What: "start east/1 at epoch 1"}, {At: 3500 * time.Microsecond, What: "east/1 wrote fenced"}},
		Admissions: []Admission{
			admitted("east/1", 10, 1, 1.1), admitted("east/1", 10, 2, 2.1), admitted("west/1", 20, 4, 4.2), admitted("east/1", 10, 3, 3.1),
		},
		Denied: 7,
	}
	var b strings.Builder
	h.Write(&b)
	want := `history of seed 42 (4 admitted, 7 denied):
   0.000000s  start east/1 at epoch 1
   0.001000s  east/1 admitted 3× with token 10, until 0.003100s
   0.003500s  east/1 wrote fenced
   0.004000s  west/1 admitted 1× with token 20, until 0.004200s
`
	if b.String() != want {
		t.Errorf("history:\n%s\nwant:\n%s", b.String(), want)
	}
}

package charts

import (
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	"k8s.io/utils/ptr"
)

// TestAPIPriority: with apiPriority (the default) the chart installs a
// PriorityLevelConfiguration and a FlowSchema, both named after the
// release, that put every request of the service account fencegate runs as
// into that level, and runs fencegate with no client-side limit
// (FENCEGATE_KUBE_API_QPS=-1); disabled, it installs neither and passes
// kubeApi's limit. It refuses what the API server would refuse.
func TestAPIPriority(t *testing.T) {
	h := newHelm(t)
	defaults := []string{filepath.Join(h.chartDir(fencegateChart), "ci", "defaults-values.yaml")}
	base := renderFencegate(t, h, defaults)
	level := func(shares, lendable, queues, handSize, queueLength int32) *flowcontrolv1.PriorityLevelConfigurationSpec {
		return &flowcontrolv1.PriorityLevelConfigurationSpec{
			Type: flowcontrolv1.PriorityLevelEnablementLimited,
			Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{
				NominalConcurrencyShares: ptr.To(shares),
				LendablePercent:          ptr.To(lendable),
				LimitResponse: flowcontrolv1.LimitResponse{
					Type:    flowcontrolv1.LimitResponseTypeQueue,
					Queuing: &flowcontrolv1.QueuingConfiguration{Queues: queues, HandSize: handSize, QueueLengthLimit: queueLength},
				},
			},
		}
	}
	schema := func(serviceAccount string, precedence int32) *flowcontrolv1.FlowSchemaSpec {
		return &flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: fullname},
			MatchingPrecedence:         precedence,
			DistinguisherMethod:        &flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByUserType},
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects: []flowcontrolv1.Subject{{
					Kind:           flowcontrolv1.SubjectKindServiceAccount,
					ServiceAccount: &flowcontrolv1.ServiceAccountSubject{Name: serviceAccount, Namespace: namespace},
				}},
				ResourceRules: []flowcontrolv1.ResourcePolicyRule{{
					Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}, ClusterScope: true, Namespaces: []string{"*"},
				}},
			}},
		}
	}

	tests := map[string]struct {
		args []string
		// want is a part of the refusal; empty: the chart renders, with
		// wantLevel and wantSchema (nil: neither is rendered) and wantEnv
		// in the Deployment.
		want       []string
		wantLevel  *flowcontrolv1.PriorityLevelConfigurationSpec
		wantSchema *flowcontrolv1.FlowSchemaSpec
		wantEnv    map[string]string
	}{
		"defaults: a priority level of its own, no client-side limit": {
			wantLevel:  level(30, 50, 16, 4, 50),
			wantSchema: schema(fullname, 800),
			wantEnv:    map[string]string{"FENCEGATE_KUBE_API_QPS": "-1", "FENCEGATE_KUBE_API_BURST": "<unset>"},
		},
		"the operator's service account": {
			args:       setValues("serviceAccount.create=false", "serviceAccount.name=platform-fencegate"),
			wantLevel:  level(30, 50, 16, 4, 50),
			wantSchema: schema("platform-fencegate", 800),
			wantEnv:    map[string]string{"FENCEGATE_KUBE_API_QPS": "-1"},
		},
		"the level and the schema's precedence tuned": {
			args: setValues("apiPriority.matchingPrecedence=500", "apiPriority.nominalConcurrencyShares=60", "apiPriority.lendablePercent=0",
				"apiPriority.queuing.queues=64", "apiPriority.queuing.handSize=6", "apiPriority.queuing.queueLengthLimit=100"),
			wantLevel:  level(60, 0, 64, 6, 100),
			wantSchema: schema(fullname, 500),
			wantEnv:    map[string]string{"FENCEGATE_KUBE_API_QPS": "-1"},
		},
		"disabled: fencegate limits itself to the default rate": {
			args:    setValues("apiPriority.enabled=false"),
			wantEnv: map[string]string{"FENCEGATE_KUBE_API_QPS": "200", "FENCEGATE_KUBE_API_BURST": "400"},
		},
		"disabled, with a rate of the operator's": {
			args:    append(setValues("apiPriority.enabled=false", "kubeApi.burst=100"), "--set-json", "kubeApi.qps=12.5"),
			wantEnv: map[string]string{"FENCEGATE_KUBE_API_QPS": "12.5", "FENCEGATE_KUBE_API_BURST": "100"},
		},
		"disabled, no client-side limit: the cluster's own FlowSchemas classify fencegate": {
			args:    setValues("apiPriority.enabled=false", "kubeApi.qps=-1"),
			wantEnv: map[string]string{"FENCEGATE_KUBE_API_QPS": "-1", "FENCEGATE_KUBE_API_BURST": "400"},
		},
		"a rate of 0, which client-go would take for 5 a second": {
			args: setValues("apiPriority.enabled=false", "kubeApi.qps=0"),
			want: []string{"at '/kubeApi/qps'"},
		},
		"a burst of 0": {
			args: setValues("apiPriority.enabled=false", "kubeApi.burst=0"),
			want: []string{"at '/kubeApi/burst'"},
		},
		"the exempt schema's precedence": {
			args: setValues("apiPriority.matchingPrecedence=1"),
			want: []string{"at '/apiPriority/matchingPrecedence'", "minimum: got 1, want 2"},
		},
		"a precedence beyond the API server's": {
			args: setValues("apiPriority.matchingPrecedence=10001"),
			want: []string{"at '/apiPriority/matchingPrecedence'", "maximum: got 10,001, want 10,000"},
		},
		"no shares": {
			args: setValues("apiPriority.nominalConcurrencyShares=0"),
			want: []string{"at '/apiPriority/nominalConcurrencyShares'"},
		},
		"more than all seats lendable": {
			args: setValues("apiPriority.lendablePercent=101"),
			want: []string{"at '/apiPriority/lendablePercent'"},
		},
		"a hand of more queues than there are": {
			args: setValues("apiPriority.queuing.queues=4", "apiPriority.queuing.handSize=8"),
			want: []string{"apiPriority.queuing.handSize (8) must not be above apiPriority.queuing.queues (4)"},
		},
		"a misspelt value": {
			args: setValues("apiPriority.queueing.queues=4"),
			want: []string{"at '/apiPriority'", "additional properties 'queueing' not allowed"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if len(tc.want) > 0 {
				checkRefused(t, h, defaults, tc.args, tc.want)
				return
			}
			r := renderFencegate(t, h, defaults, tc.args...)
			wantEnv(t, r.container, tc.wantEnv)
			if tc.wantSchema == nil {
				if r.count("PriorityLevelConfiguration") != 0 || r.count("FlowSchema") != 0 {
					t.Errorf("objects %v: want no PriorityLevelConfiguration or FlowSchema with apiPriority disabled", r.names())
				}
				// Nothing else changes.
				want := slices.DeleteFunc(base.names(), func(n string) bool {
					return n == "PriorityLevelConfiguration/"+fullname || n == "FlowSchema/"+fullname
				})
				if got := r.names(); !slices.Equal(got, want) {
					t.Errorf("objects %v, want those of the defaults but the priority level and the FlowSchema, %v", got, want)
				}
				return
			}
			var pl flowcontrolv1.PriorityLevelConfiguration
			r.get(t, "PriorityLevelConfiguration", fullname, &pl)
			if !reflect.DeepEqual(pl.Spec, *tc.wantLevel) {
				t.Errorf("priority level %+v, want %+v", pl.Spec, *tc.wantLevel)
			}
			var fs flowcontrolv1.FlowSchema
			r.get(t, "FlowSchema", fullname, &fs)
			if !reflect.DeepEqual(fs.Spec, *tc.wantSchema) {
				t.Errorf("FlowSchema %+v, want %+v", fs.Spec, *tc.wantSchema)
			}
			if sa := fs.Spec.Rules[0].Subjects[0].ServiceAccount; sa.Name != r.deploy.Spec.Template.Spec.ServiceAccountName {
				t.Errorf("the FlowSchema matches the service account %s, the pods run as %s", sa.Name, r.deploy.Spec.Template.Spec.ServiceAccountName)
			}
			// The API server reads FlowSchemas itself: fencegate needs no
			// right on them.
			if !reflect.DeepEqual(r.clusterRole.Rules, base.clusterRole.Rules) {
				t.Errorf("ClusterRole rules %v, want the defaults' %v", r.clusterRole.Rules, base.clusterRole.Rules)
			}
		})
	}
}

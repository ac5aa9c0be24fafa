// Module crds pins the projects whose CustomResourceDefinitions the hold
// tests read (test/actuators, TestShippedHoldsOnRealCRDs): every shipped
// rule of policies/hold.rego is tried on the real CRD of its kind, taken
// from the module cache at the version required here, never from a copy.
// Nothing is built from this module: it has no package and no tool, only
// these requirements, and go.sum holds the hashes of these modules alone,
// which is all that `go mod download` of them needs. Do not run go mod tidy
// here: it would resolve the projects' whole dependency graphs, which no
// test reads.
//
// Each version is the newest that the Go module proxy serves and whose own
// go.mod asks for no newer Go than the project's machines have (1.26). The
// proxy serves no Argo Workflows v3: its CronWorkflow CRD comes from the v4
// module (still argoproj.io/v1alpha1). Flux is pinned by hack/tools/flux,
// but for the HelmRelease (below).
//
// helm-controller's root module, which carries its CRD files, is not served
// by the proxy; its API module is, and helm-controller generates its CRD
// from that module's Go types (cd api; controller-gen crd:crdVersions=v1
// paths=./...). The test does the same, in the API module's directory in
// the module cache and with its own go.sum, with the pinned controller-gen
// (hack/tools/controller-gen): the packages are loaded at the versions
// helm-controller generates with, and this go.sum needs no more than the API
// module's hashes.
module github.com/fencegate/fencegate/hack/tools/crds

go 1.26.0

require (
	// Argo CD: the Application CRD, manifests/crds/application-crd.yaml.
	github.com/argoproj/argo-cd/v3 v3.5.8
	// Argo Workflows: the CronWorkflow CRD with its full schema,
	// manifests/base/crds/full/argoproj.io_cronworkflows.yaml.
	github.com/argoproj/argo-workflows/v4 v4.0.5
	// A Crossplane provider: its namespaced managed resource Object,
	// package/crds/kubernetes.m.crossplane.io_objects.yaml.
	github.com/crossplane-contrib/provider-kubernetes v1.3.1
	// Flux helm-controller: the HelmRelease CRD, generated from its API
	// module (above). Not the newest: v1.6.5 was released together with
	// kustomize-controller v1.9.6, which hack/tools/flux pins (flux2 v2.9.5
	// pins the v1.6.4 and v1.9.5 before them), so that both Flux kinds come
	// from one Flux release; the test checks that the two require the same
	// github.com/fluxcd/pkg/apis/meta. v1.7 is a later Flux (and asks for
	// Go 1.27).
	github.com/fluxcd/helm-controller/api v1.6.5
	// KEDA: the ScaledObject and ScaledJob CRDs, config/crd/bases.
	github.com/kedacore/keda/v2 v2.21.0
	// Velero: the Schedule CRD, config/crd/v1/bases/velero.io_schedules.yaml.
	github.com/vmware-tanzu/velero v1.18.3
)

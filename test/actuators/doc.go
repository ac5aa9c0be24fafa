// Package actuators shows real actuators stopping while their cluster does
// not hold the fence, held by fencegate's hold controller deciding from the
// shipped policies: the real kube-controller-manager's CronJob controller
// on a real node (test/node), and Flux's kustomize-controller, built from
// its pinned module (hack/tools/flux), applying from a source whose
// artifact the test serves, with the Flux CRDs taken from the pinned
// modules. TestShippedHoldsOnRealCRDs holds and releases an object of every
// other kind the shipped policies hold (Flux's HelmRelease, Argo CD, KEDA,
// Velero, Argo Workflows, a Crossplane managed resource) on its project's
// real CRD, read from the modules hack/tools/crds pins or, for the
// HelmRelease, generated from helm-controller's API module with
// controller-gen as helm-controller generates it: the hold is accepted, the
// held field is not pruned, and the release restores the object exactly.
// Each test can be run alone by its name.
package actuators

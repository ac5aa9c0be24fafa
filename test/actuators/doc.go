// Package actuators shows real actuators stopping while their cluster does
// not hold the fence, held by fencegate's hold controller deciding from the
// shipped policies: the real kube-controller-manager's CronJob controller
// on a real node (test/node), and Flux's kustomize-controller, built from
// its pinned module (hack/tools/flux), applying from a source whose
// artifact the test serves, with the Flux CRDs taken from the pinned
// modules. Each test can be run alone by its name.
package actuators

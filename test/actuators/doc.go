// Package actuators shows real actuators stopping while their cluster does
// not hold the fence: the real kube-controller-manager's CronJob controller
// on a real node (test/node), held by fencegate's hold controller deciding
// from the shipped policies. Each test can be run alone by its name.
package actuators

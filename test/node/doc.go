// Package node runs a one-node Kubernetes cluster on this machine for tests:
// a control plane from test/cluster with kube-controller-manager and
// kube-scheduler, and a node of containerd, runc, the CNI bridge plugin, a
// kubelet and kube-proxy, all real and built or installed by `make test`.
//
// The node lives in namespaces of its own: a network namespace joined to
// the host by a veth pair (the node's address is on its own interface, not
// loopback), a mount namespace (tmpfs over /run, /var/lib and /var/log, so
// containerd's and the kubelet's fixed paths never touch the host's) and a
// PID namespace whose first process is the pause binary. Ending that process
// ends every process of the node, containers and shims included; the
// namespaces then take the bridge, the veths, kube-proxy's iptables rules
// and every mount with them. Stop does that and removes the host's routes,
// the cgroups and the directories, also after a failed start.
//
// Services reach pods through kube-proxy (iptables mode) in the node's
// network namespace, and the host routes the Service range to it, so the
// API server calls webhooks through their Service as in any cluster, and
// pods reach the API server and each other by ClusterIP. There is no
// cluster DNS: address Services by ClusterIP.
package node

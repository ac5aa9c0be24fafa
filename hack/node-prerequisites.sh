#!/usr/bin/env bash
# node-prerequisites.sh installs, with apt-get, the Debian packages the node
# test (test/node) runs: containerd, runc, the CNI plugins, iptables (for
# kube-proxy), a static busybox (the shell of the chart's `helm test` pod)
# and the ip, sysctl, unshare and nsenter commands. It does nothing when they
# are all installed; without root or apt-get it says what is missing, and the
# node test then skips with that message (fails, when CI is set).
set -euo pipefail

packages=(containerd runc containernetworking-plugins iptables busybox-static iproute2 procps util-linux)
missing=()
for p in "${packages[@]}"; do
	if [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]; then
		missing+=("$p")
	fi
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
	echo "node-prerequisites: missing ${missing[*]}; install them as root (apt-get install ${missing[*]}), or the node test skips (fails when CI is set)" >&2
	exit 0
fi
echo "node-prerequisites: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

#!/usr/bin/env bash
# build-tools.sh NAME... builds the commands pinned by hack/tools/NAME/go.mod
# (its `tool` directives) into .cache/tools/NAME-KEY, where KEY is a hash of
# that go.mod and go.sum, and links each command into .cache/bin. A build that
# already exists for the same KEY is reused, so only the first run pays for it.
#
# The Kubernetes, etcd and Flux (kustomize-controller) binaries cannot be
# installed with `go install` (their go.mod files carry replace directives);
# building them inside a small module of our own that requires and replaces
# them is what works.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/go-tags.sh
. "$root/hack/go-tags.sh"
cache=${FENCEGATE_CACHE:-$root/.cache}
mkdir -p "$cache/bin" "$cache/tools"

# kube_minor prints the minor version of the pinned Kubernetes release.
kube_minor() {
	local v
	v=$(cd "$root/hack/tools/kube" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
	v=${v#v1.}
	v=${v%%.*}
	[ -n "$v" ] || { echo "build-tools: cannot read the Kubernetes version of hack/tools/kube" >&2; return 1; }
	echo "$v"
}

build() {
	local name=$1 dir=$root/hack/tools/$1
	[ -f "$dir/go.mod" ] || { echo "build-tools: no tools module hack/tools/$name" >&2; return 2; }
	# With bin/fencegate's tags, so that the packages a tool shares with it
	# compile once.
	local ldflags="-s -w" tags=$GO_TAGS
	case $name in
	opa)
		# OPA's server is measured beside fencegate (test/bench) as OPA
		# releases it.
		tags=""
		;;
	promtool)
		# Rule checks and unit tests need no service discovery: without
		# the cloud SDKs promtool builds in a fraction of the time.
		tags+=",remove_all_sd"
		;;
	kube)
		# Stamp the version so `kube-apiserver --version` and kubectl's
		# server/client skew check see the real release.
		local v
		v=$(cd "$dir" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
		local minor
		minor=$(kube_minor) || return 1
		ldflags+=" -X k8s.io/component-base/version.gitVersion=$v"
		ldflags+=" -X k8s.io/component-base/version.gitMajor=1"
		ldflags+=" -X k8s.io/component-base/version.gitMinor=$minor"
		ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=$v"
		ldflags+=" -X k8s.io/client-go/pkg/version.gitMajor=1"
		ldflags+=" -X k8s.io/client-go/pkg/version.gitMinor=$minor"
		;;
	helm)
		# Without a cluster (helm template, helm lint), helm assumes the
		# Kubernetes version it was stamped with; unstamped it assumes
		# 1.20, which the charts' kubeVersion refuses.
		local v
		v=$(cd "$dir" && go list -m -f '{{.Version}}' helm.sh/helm/v3)
		ldflags+=" -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1"
		local minor
		minor=$(kube_minor) || return 1
		ldflags+=" -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$minor"
		ldflags+=" -X helm.sh/helm/v3/internal/version.version=$v"
		;;
	esac
	local key out
	# A tools module may hold a command of its own (hack/tools/image): its
	# source is part of the key.
	key=$( (cat "$dir/go.mod" "$dir/go.sum"; echo "$ldflags${tags:+ tags=$tags}"; find "$dir" -name '*.go' | LC_ALL=C sort | xargs -r cat) |
		sha256sum | cut -c1-12)
	out=$cache/tools/$name-$key
	exec 9>"$cache/tools/$name.lock"
	flock 9
	if [ ! -f "$out/.complete" ]; then
		echo "build-tools: building $name (once; cached in ${out#"$root"/})" >&2
		local start=$SECONDS
		rm -rf "$out.tmp"
		# A cold build of the control plane takes minutes: say that it is
		# still going. The ticker does not hold the lock (9>&-), and a
		# failed build stops it: otherwise it would keep every later build
		# of this tool waiting.
		(while sleep 30; do echo "build-tools: still building $name ($((SECONDS - start))s) …" >&2; done) 9>&- &
		local ticker=$!
		# shellcheck disable=SC2064 # the ticker's pid, now: it is local
		trap "kill $ticker 2>/dev/null" EXIT
		(cd "$dir" && CGO_ENABLED=0 go build -trimpath -tags "$tags" -ldflags "$ldflags" -o "$out.tmp/" tool)
		kill $ticker 2>/dev/null || true
		trap - EXIT
		# The etcd server's main package is the module root, named "server".
		if [ -f "$out.tmp/server" ]; then mv "$out.tmp/server" "$out.tmp/etcd"; fi
		# kube is the five Kubernetes daemons in one, each run by its name.
		if [ -f "$out.tmp/kube" ]; then
			local cmd
			for cmd in $("$out.tmp/kube" names); do ln -s kube "$out.tmp/$cmd"; done
		fi
		touch "$out.tmp/.complete"
		rm -rf "$out"
		mv "$out.tmp" "$out"
		echo "build-tools: built $name in $((SECONDS - start))s" >&2
	fi
	local bin
	for bin in "$out"/*; do
		ln -sfn "$bin" "$cache/bin/$(basename "$bin")"
	done
	exec 9>&-
}

for name in "$@"; do
	build "$name"
done

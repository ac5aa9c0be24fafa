#!/usr/bin/env bash
# tool-versions.sh [--fix] checks that the tools modules that build what
# bin/fencegate also compiles (kube, etcd, opa, helm, promtool and
# controller-gen: client-go, apimachinery, the etcd server, OPA, gRPC,
# Prometheus's client) require the same version of every module they share
# with cmd/fencegate. The tools and bin/fencegate are compiled alike (static,
# -trimpath, hack/go-tags.sh's tags but for opa; hack/build-fencegate.sh,
# hack/build-tools.sh), so then Go's build cache compiles
# those packages once, for all of them: on a fresh machine that saves `make
# test` most of a full compile of bin/fencegate, and most of helm's,
# promtool's and controller-gen's. A version that differs splits every
# package above it.
#
# With --fix it raises each tools module to the main module's version where
# the main module's is newer (go get, go mod tidy). A tools module that needs
# a newer version than the main module is reported: raise the main module.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tools=(kube etcd opa helm promtool controller-gen golangci-lint)
# hack/tools/flux is not checked: it builds Flux's kustomize-controller, for
# test/actuators, with exactly the versions that release requires (its own
# Kubernetes and controller-runtime, a minor behind ours, and some modules
# newer than ours). Raising them would run a kustomize-controller Flux never
# released; lowering ours is not this tool's to decide.
# Modules that a tool keeps at its own version, as "tool module": the main
# module's version breaks it, and no package bin/fencegate compiles is above
# them in the tool.
kept=(
	# depguard and protogetter use glob.Glob, which gobwas/glob v1 removed.
	"golangci-lint github.com/gobwas/glob"
)
fix=false
[ "${1:-}" = --fix ] && fix=true

# modules PATTERN lists "module version" for every module that provides a
# package to PATTERN's build, with replacements applied.
modules() {
	CGO_ENABLED=0 go list -deps -f '{{with .Module}}{{with .Replace}}{{.Path}} {{.Version}}{{else}}{{.Path}} {{.Version}}{{end}}{{end}}' "$1" |
		grep -v '^github.com/fencegate/' | LC_ALL=C sort -u
}

# is_kept TOOL MODULE succeeds when TOOL keeps MODULE at its own version.
is_kept() {
	local k
	for k in "${kept[@]}"; do
		[ "$k" = "$1 $2" ] && return 0
	done
	return 1
}

# newer A B succeeds when version A is newer than B. A release is newer than
# the pre-releases (and pseudo-versions) of its own number.
newer() {
	local a=$1 b=$2
	if [ "${a%%-*}" = "${b%%-*}" ] && [ "${a#*-}" = "$a" ] && [ "${b#*-}" != "$b" ]; then
		return 0
	fi
	if [ "${a%%-*}" = "${b%%-*}" ] && [ "${b#*-}" = "$b" ]; then
		return 1
	fi
	[ "$(printf '%s\n%s\n' "$a" "$b" | sort -V | tail -1)" = "$a" ]
}

main=$(cd "$root" && modules ./cmd/fencegate)
status=0
for tool in "${tools[@]}"; do
	dir=$root/hack/tools/$tool
	differ=$(LC_ALL=C join <(echo "$main") <(cd "$dir" && modules tool) | awk '$2 != $3')
	[ -z "$differ" ] && continue
	while read -r path mainv toolv; do
		if is_kept "$tool" "$path"; then
			continue
		fi
		if $fix && newer "$mainv" "$toolv"; then
			(cd "$dir" && go get "$path@$mainv")
			continue
		fi
		echo "tool-versions: hack/tools/$tool builds $path $toolv, bin/fencegate $mainv" >&2
		status=1
	done <<<"$differ"
	if $fix; then (cd "$dir" && go mod tidy); fi
done
if [ $status -ne 0 ]; then
	echo "tool-versions: run hack/tool-versions.sh --fix (it raises the tools modules; a tool needing a newer version means raising the main module)" >&2
fi
exit $status

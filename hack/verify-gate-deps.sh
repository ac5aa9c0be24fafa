#!/usr/bin/env bash
# verify-gate-deps.sh [MODULE...] checks that an operator's module that
# imports only the gate library (github.com/fencegate/fencegate/gate)
# inherits none of the modules that only fencegate's benchmarks and chart
# tests need: vegeta, gonum's plot and Prometheus' server module live in the
# modules of test/bench and test/charts, not in the root module's go.mod,
# which every importer's module graph reads. Each MODULE given is checked
# too (hack/verify-gate-deps_test.sh gives one the gate does need, to see
# the check fail).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# gonum.org/v1/gonum is not among them: gRPC's own go.mod requires it.
forbidden=(github.com/tsenart/vegeta gonum.org/v1/plot github.com/prometheus/prometheus "$@")

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
go_version=$(sed -n 's/^go //p' "$root/go.mod")
cat >"$scratch/go.mod" <<MOD
module example.com/operator

go $go_version

require github.com/fencegate/fencegate v0.0.0

replace github.com/fencegate/fencegate => $root
MOD
printf 'package main\n\nimport _ "github.com/fencegate/fencegate/gate"\n\nfunc main() {}\n' >"$scratch/main.go"
# The root module's sums: the scratch module needs no download the root
# module has not made.
cp "$root/go.sum" "$scratch/go.sum"
cd "$scratch"
export GOWORK=off
go mod tidy
go mod graph >graph.txt
# A graph without controller-runtime is not the gate's: the check would
# pass on anything.
if ! grep -q ' sigs.k8s.io/controller-runtime@' graph.txt; then
	echo "verify-gate-deps: the scratch module's graph does not name controller-runtime: not the gate's graph" >&2
	exit 1
fi
status=0
for m in "${forbidden[@]}"; do
	# A module path in the graph is followed by @version, or by /v2 … for
	# a major version of its own.
	if found=$(awk '{print $2}' graph.txt | grep -E "^${m//./\\.}[@/]" | sort -u) && [ -n "$found" ]; then
		echo "verify-gate-deps: a module that imports only the gate requires $m:" >&2
		echo "$found" | while read -r mv; do
			echo "  $mv, required by:" >&2
			grep " $mv\$" graph.txt | cut -d' ' -f1 | sed 's/^/    /' >&2
		done
		status=1
	fi
done
[ "$status" -eq 0 ] && echo "verify-gate-deps: the gate's importers inherit none of ${forbidden[*]}"
exit "$status"

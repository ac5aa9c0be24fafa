#!/usr/bin/env bash
# verify-generate.sh regenerates the deepcopy code, the CRD manifests and the
# fence API's Go code (make generate) in a copy of the working tree, and
# fails, naming the files, when any differs from the working tree's. It
# writes nothing in the tree, so it can run while the tests compile it.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
generated=(api config/crd charts/fencegate/crds)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Tracked and untracked (not ignored) files, as they are in the tree.
(cd "$root" && git ls-files -z --cached --others --exclude-standard |
	while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
	xargs -0 cp -P --parents -t "$work")
# A make of its own (MAKEFLAGS cleared): the job server of a make that runs
# this script does not reach it.
MAKEFLAGS= make --no-print-directory -C "$work" generate FENCEGATE_CACHE="${FENCEGATE_CACHE:-$root/.cache}" >/dev/null
stale=$(for d in "${generated[@]}"; do diff -r -q "$root/$d" "$work/$d" || true; done)
if [ -n "$stale" ]; then
	echo "${stale//$work\//(regenerated) }" | sed "s#$root/##g" >&2
	echo "generated files are stale; run 'make generate' and commit" >&2
	exit 1
fi

#!/usr/bin/env bash
# Tests hack/verify-gate-deps.sh: it passes on the tree and fails when asked
# to forbid a module the gate does need (controller-runtime), naming it.
set -euo pipefail

check=$(cd "$(dirname "$0")" && pwd)/verify-gate-deps.sh
err=$(mktemp)
trap 'rm -f "$err"' EXIT

"$check" >/dev/null
if "$check" sigs.k8s.io/controller-runtime >/dev/null 2>"$err"; then
	echo "verify-gate-deps: passed although the gate requires sigs.k8s.io/controller-runtime" >&2
	exit 1
fi
grep -q 'requires sigs.k8s.io/controller-runtime' "$err"
echo "verify-gate-deps: passes on the tree and fails on a module the gate requires"

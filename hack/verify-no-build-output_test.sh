#!/usr/bin/env bash
# Tests hack/verify-no-build-output.sh on scratch repositories: it passes on
# source alone and fails on a tracked executable or a tracked file over 1 MiB.
set -euo pipefail

check=$(cd "$(dirname "$0")" && pwd)/verify-no-build-output.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# repo NAME makes a scratch repository with one source file.
repo() {
	local dir=$work/$1
	git init -q "$dir"
	printf 'package main\n\nfunc main() {}\n' >"$dir/main.go"
	echo "$dir"
}

expect() {
	local want=$1 name=$2 dir=$3 got=0
	git -C "$dir" add -A
	"$check" "$dir" 2>"$work/$name.err" || got=$?
	if { [ "$want" = pass ] && [ "$got" -ne 0 ]; } || { [ "$want" = fail ] && [ "$got" -eq 0 ]; }; then
		echo "verify-no-build-output: $name: want $want, got exit $got: $(cat "$work/$name.err")" >&2
		exit 1
	fi
}

dir=$(repo source); expect pass source "$dir"
dir=$(repo executable); cp /bin/true "$dir/tool"; expect fail executable "$dir"
grep -q 'tool: an executable' "$work/executable.err"
dir=$(repo large); head -c $((1024 * 1024 + 1)) /dev/zero >"$dir/data.bin"; expect fail large "$dir"
grep -q 'data.bin: .*over the 1 MiB limit' "$work/large.err"
echo "verify-no-build-output: its three cases behave"

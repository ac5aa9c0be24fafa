#!/usr/bin/env bash
# verify-no-build-output.sh fails, naming the files, when git tracks build
# output: an executable (ELF, Mach-O or PE) or any file over 1 MiB that is
# not in the allow-list below. A stray `go build` in a module folder would
# otherwise land in every clone for good.
#
# Usage: hack/verify-no-build-output.sh [DIR]  (DIR: a git checkout, default
# the project's root)
set -euo pipefail

root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
limit=$((1024 * 1024))
# Files allowed over the limit, each with its reason. None today.
allowed=()

cd "$root"
found=()
while IFS= read -r -d '' f; do
	[ -f "$f" ] || continue
	for a in "${allowed[@]}"; do [ "$f" = "$a" ] && continue 2; done
	size=$(stat -c %s "$f")
	if [ "$size" -gt "$limit" ]; then
		found+=("$f: $((size / 1024)) KiB, over the 1 MiB limit")
		continue
	fi
	# The first bytes tell an executable: ELF, Mach-O (both byte orders,
	# 32 and 64 bits, fat) and PE's MZ.
	magic=$(head -c 4 "$f" | od -An -tx1 | tr -d ' \n')
	case $magic in
	7f454c46 | feedface | feedfacf | cefaedfe | cffaedfe | cafebabe | 4d5a*)
		found+=("$f: an executable")
		;;
	esac
done < <(git ls-files -z)
if [ ${#found[@]} -gt 0 ]; then
	printf '%s\n' "${found[@]}" >&2
	echo "git tracks build output: remove it (git rm --cached) and ignore it" >&2
	exit 1
fi

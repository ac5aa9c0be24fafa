#!/usr/bin/env bash
# image.sh OUT builds fencegate's two binaries from source into the fencegate
# image and writes it to OUT as fencegate.local/fencegate:$VERSION (an OCI
# image archive that ctr, docker, kind, k3d and skopeo import). No container
# engine is used and nothing is pulled: the image is the static binaries
# /fencegate (its entrypoint, which the fencegate chart runs) and
# /fencegate-authority (which the fencegate-authority chart runs) as the only
# layer on an empty base, run as 65532:65532, the user the charts run them
# as. One image serves both charts; each process pages in only its own
# binary.
#
# The same commit gives the same digest: the binaries are built with -trimpath
# (hack/build-fencegate.sh), and the image's creation time and file times are
# the commit's time (SOURCE_DATE_EPOCH overrides it). GOARCH picks the
# architecture.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${FENCEGATE_CACHE:-$root/.cache}
out=${1:?usage: hack/image.sh OUT.tar}

version=${VERSION:-$(git -C "$root" describe --tags --always --dirty 2>/dev/null || echo dev)}
revision=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
epoch=${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 0)}
arch=${GOARCH:-$(go env GOARCH)}

"$root/hack/build-tools.sh" image
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
GOOS=linux GOARCH=$arch VERSION=$version "$root/hack/build-fencegate.sh" "$work" -s -w
mkdir -p "$(dirname "$out")"
"$cache/bin/build-image" -ref "fencegate.local/fencegate:$version" -o "$out" -arch "$arch" -epoch "$epoch" \
	-file "$work/fencegate:/fencegate" -file "$work/fencegate-authority:/fencegate-authority" -entrypoint /fencegate -user 65532:65532 \
	-annotation "org.opencontainers.image.source=https://github.com/fencegate/fencegate" \
	-annotation "org.opencontainers.image.revision=$revision" \
	-annotation "org.opencontainers.image.version=$version" \
	-annotation "org.opencontainers.image.created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)" \
	-annotation "org.opencontainers.image.title=fencegate"

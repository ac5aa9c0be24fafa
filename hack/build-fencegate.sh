#!/usr/bin/env bash
# build-fencegate.sh OUT [LDFLAG...] builds cmd/fencegate into OUT the one way
# the project builds it: static (CGO_ENABLED=0) and -trimpath, with
# main.version from $VERSION (default: git describe). `make build`, the image
# (hack/image.sh) and the tests' stack (test/stack) all build with it, so that
# they share one set of compiled packages in Go's build cache, and with the
# tools (hack/tool-versions.sh). GOOS and GOARCH pass through.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=$(realpath -m "${1:?usage: hack/build-fencegate.sh OUT [LDFLAG...]}")
shift
version=${VERSION:-$(git -C "$root" describe --tags --always --dirty 2>/dev/null || echo dev)}
cd "$root"
CGO_ENABLED=0 exec go build -trimpath -ldflags "$* -X main.version=$version" -o "$out" ./cmd/fencegate

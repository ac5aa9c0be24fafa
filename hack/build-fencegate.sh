#!/usr/bin/env bash
# build-fencegate.sh DIR [LDFLAG...] builds fencegate's two binaries into DIR
# the one way the project builds them: DIR/fencegate (cmd/fencegate, what a
# cluster runs and the operator's commands) and DIR/fencegate-authority
# (cmd/fencegate-authority, the fence authority). Static (CGO_ENABLED=0) and
# -trimpath, with main.version from $VERSION (default: git describe). `make
# build`, the image (hack/image.sh) and the tests' stack (test/stack) all
# build with it, so that they share one set of compiled packages in Go's
# build cache, and with the tools (hack/tool-versions.sh). GOOS and GOARCH
# pass through. The build tags are hack/go-tags.sh's.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/go-tags.sh
. "$root/hack/go-tags.sh"
out=$(realpath -m "${1:?usage: hack/build-fencegate.sh DIR [LDFLAG...]}")
shift
version=${VERSION:-$(git -C "$root" describe --tags --always --dirty 2>/dev/null || echo dev)}
cd "$root"
mkdir -p "$out"
CGO_ENABLED=0 exec go build -trimpath -tags "$GO_TAGS" -ldflags "$* -X main.version=$version" -o "$out/" ./cmd/fencegate ./cmd/fencegate-authority

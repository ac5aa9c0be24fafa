# syntax=docker/dockerfile:1
#
# The fencegate image: one static binary for every command (`run`,
# `authority`, `fence`, `eval`), on distroless as the nonroot user (65532),
# the user the Helm charts run it as.
#
#   docker build -t ghcr.io/fencegate/fencegate:dev --build-arg VERSION=$(git describe --always) .
#   docker buildx build --platform linux/amd64,linux/arm64 ...
#
# The build stage runs on the builder's own platform and cross-compiles
# (CGO_ENABLED=0 needs no C toolchain for the target).

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
WORKDIR /src
# Modules first: a source change then reuses the downloaded modules.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=dev
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/fencegate ./cmd/fencegate

# static: CA certificates and tzdata, no shell, no package manager.
FROM gcr.io/distroless/static-debian13:nonroot
COPY --from=build /out/fencegate /fencegate
USER 65532:65532
ENTRYPOINT ["/fencegate"]

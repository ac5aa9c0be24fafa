# shellcheck shell=bash
# go-tags.sh sets GO_TAGS, the build tags of fencegate's binaries
# (hack/build-fencegate.sh) and of what shares their compiled packages: the
# tools (hack/build-tools.sh) and, through the Makefile's GOFLAGS, the
# tests, go vet and golangci-lint. A tag changes the files of the package
# it selects, so a build without it compiles every package above that one
# again.
#
# grpcnotrace keeps gRPC from linking golang.org/x/net/trace, whose init
# executes an html/template: a binary that can execute a template keeps
# every exported method of every type it links, since a template may call
# any of them by name. Without it fencegate's code is a fifth larger, and a
# cluster pod pages that in (docs/bench/README.md, memory;
# cmd/fencegate's TestKeepsUnusedMethodsOut).
GO_TAGS=grpcnotrace

# fencegate: `make run` shows a two-cluster failover on this machine,
# `make test` runs every test. See README.md.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build

# FENCEGATE_CACHE moves the tool cache, e.g. to share one between clones.
CACHE   := $(or $(FENCEGATE_CACHE),$(CURDIR)/.cache)
TOOLBIN := $(CACHE)/bin
export FENCEGATE_CACHE := $(CACHE)
export PATH := $(TOOLBIN):$(PATH)
export FENCEGATE_TEST_ASSETS := $(TOOLBIN)

# Every Go build under make (tools, bin/fencegate, go vet, the tests and
# golangci-lint) compiles without DWARF: the tools and the test binaries are
# linked without it anyway (-w), race reports and panics read the line table
# instead, and compiling without it takes about 12% less time. A -gcflags of
# your own in GOFLAGS wins: GOFLAGS=-gcflags=all=-dwarf=true builds for Delve.
ifeq ($(filter -gcflags=%,$(GOFLAGS)),)
export GOFLAGS := $(strip $(GOFLAGS) -gcflags=all=-dwarf=false)
endif
# The tests, go vet and golangci-lint build with the binaries' and the
# tools' tags (hack/go-tags.sh), so that they test what those link.
ifeq ($(filter -tags=%,$(GOFLAGS)),)
export GOFLAGS := $(strip $(GOFLAGS) -tags=$(shell . hack/go-tags.sh && echo "$$GO_TAGS"))
endif

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

# Each control plane takes ~330 MB and a core while it starts: keep few test
# binaries running at once. The test binaries are linked without DWARF
# (-w): a second less for each of some thirty links.
TEST_PARALLEL ?= 2
TEST_TIMEOUT  ?= 25m
GO_TEST_FLAGS := -p $(TEST_PARALLEL) -timeout $(TEST_TIMEOUT) -ldflags=-w
GO_TEST       ?= go test $(GO_TEST_FLAGS)

BUILD_TOOLS := hack/build-tools.sh

# The modules of their own that only tests need: test/bench (vegeta,
# gonum's plot) and test/charts (Prometheus' server module, for PromQL).
# Out of the root module, an operator that imports the gate inherits none
# of them (hack/verify-gate-deps.sh); each names the root module by a
# replace directive. `./...` stops at their go.mod: every target that runs
# or checks ./... runs them too, with go -C.
TEST_MODULES := test/charts test/bench

# bin/fencegate and bin/fencegate-authority are built as the image carries
# them (hack/build-fencegate.sh): the tests' processes and the image share
# their compiled packages.
.PHONY: build
build: ## Build bin/fencegate and bin/fencegate-authority (static, as in the image).
	VERSION=$(VERSION) hack/build-fencegate.sh bin

.PHONY: tools
tools: ## Build every pinned tool into .cache (once per version).
	$(BUILD_TOOLS) kube etcd controller-gen protoc-gen golangci-lint helm opa promtool image flux

.PHONY: control-plane
control-plane: ## Build the Kubernetes binaries (kube-apiserver, kubectl, the node's), and etcd into .cache/bin.
	$(BUILD_TOOLS) kube etcd

IMAGE ?= bin/fencegate-image.tar

.PHONY: image
image: ## Build the fencegate image from source, without a container engine, into bin/fencegate-image.tar.
	VERSION=$(VERSION) hack/image.sh $(IMAGE)
	@echo "wrote $(IMAGE) (fencegate.local/fencegate:$(VERSION))"

.PHONY: node-prerequisites
node-prerequisites: ## Install what the node test runs (containerd, runc, CNI plugins, iptables, busybox) with apt-get.
	hack/node-prerequisites.sh

.PHONY: generate
generate: ## Regenerate deepcopy code, the CRD manifest and the fence API's Go code.
	$(BUILD_TOOLS) controller-gen protoc-gen
	controller-gen object crd paths=./api/... output:crd:artifacts:config=config/crd
	cp config/crd/*.yaml charts/fencegate/crds/
	protoc-lite -I api --go_out=api --go_opt=paths=source_relative \
		--go-grpc_out=api --go-grpc_opt=paths=source_relative fence/v1/fence.proto

# verify-generate regenerates in a copy of the tree and compares: it changes
# nothing, so make test runs it while the tests compile the same files.
.PHONY: verify-generate
verify-generate: ## Fail if generated files are not up to date.
	hack/verify-generate.sh

.PHONY: lint
lint: ## gofmt, go vet, golangci-lint, no build output in git, opa fmt, opa check, and the tools' shared versions.
	@$(MAKE) --no-print-directory vet
	@$(MAKE) --no-print-directory lint-rest

# go vet and golangci-lint read the packages compiled with -race, the way
# the tests compile them: one compilation of every package serves both, where
# a plain build would compile them all once more.
.PHONY: vet
vet: ## go vet, on the packages as the race-built tests compile them.
	go vet -race ./...
	for m in $(TEST_MODULES); do go -C $$m vet -race ./...; done

.PHONY: lint-rest
lint-rest: ## Everything lint does but go vet.
	$(BUILD_TOOLS) golangci-lint opa
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	GOFLAGS="$$(go env GOFLAGS) -race" golangci-lint run ./...
	cd examples/helm-actuator && GOFLAGS="$$(go env GOFLAGS) -race" golangci-lint run --config $(CURDIR)/.golangci.yml ./...
	for m in $(TEST_MODULES); do (cd $$m && GOFLAGS="$$(go env GOFLAGS) -race" golangci-lint run --config $(CURDIR)/.golangci.yml ./...); done
	cd hack/tools/image && go vet ./... && golangci-lint run ./...
	cd hack/tools/protoc-gen && go vet ./... && golangci-lint run ./...
	hack/verify-no-build-output.sh
	hack/verify-no-build-output_test.sh
	hack/verify-gate-deps.sh
	hack/verify-gate-deps_test.sh
	opa fmt --list --fail policies test/bench
	opa check --strict policies test/bench/sidebyside/system.rego
	hack/tool-versions.sh

# make test compiles every package twice: with -race (go vet, then the
# tests and golangci-lint) and static (bin/fencegate, which the tests run and
# the image carries, sharing the tools' compiled packages).
#
# A fresh machine spends most of the run compiling, so the work is one
# graph that keeps both cores busy. First the tools the tests need, the
# node's packages (apt-get waits on the network and the disk), the race
# compile (go vet) and, at the lowest priority, golangci-lint, which shares
# few packages with the others, all together. The checks (generated files,
# golangci-lint) start once go vet has compiled what they read, at a lower
# priority, in whatever the tools' builds leave idle. bin/fencegate follows
# the tools, whose packages it reuses, and the tests follow it; the checks
# still running take the cores while the tests wait on the processes they
# started.
.PHONY: test
test: ## Every test: generated files, lint, unit, Rego, end-to-end and the charts on a real node.
	$(MAKE) --no-print-directory -j4 test-go test-checks

# The longest packages are named first, so that go test starts them first
# and the run does not end on one of them alone.
SLOW_TEST_PACKAGES := ./test/e2e ./test/safety ./test/faults ./engine ./fenceagent ./controller ./test/demo

# The root module's tests and the test modules' (test/charts, the longest
# package, first) run side by side, as they did when they were one module:
# test/charts takes one more test binary beside the root's TEST_PARALLEL.
.PHONY: test-go
test-go: test-go-root test-go-modules
	cd examples/helm-actuator && FENCEGATE_TEST_BINARY=$(CURDIR)/bin/fencegate $(GO_TEST) -race ./...
	@# The hold benchmarks at their -short size, and the engine's, the
	@# webhook's and the side-by-side's in-process ones once each, so that
	@# they stay right.
	$(GO_TEST) -short -run '^$$' -bench '^BenchmarkHold' -benchtime 1x ./hold/ ./test/actuators/
	$(GO_TEST) -short -run '^$$' -bench . -benchtime 1x ./engine/ ./webhook/
	go -C test/bench test $(GO_TEST_FLAGS) -short -run '^$$' -bench . -benchtime 1x ./sidebyside/
	cd hack/tools/image && go test ./...
	cd hack/tools/protoc-gen && go test ./...

.PHONY: test-go-root
test-go-root: test-build test-gen-tools vet node-prerequisites
	FENCEGATE_TEST_BINARY=$(CURDIR)/bin/fencegate $(GO_TEST) -race $(SLOW_TEST_PACKAGES) ./...

.PHONY: test-go-modules
test-go-modules: test-build test-gen-tools vet node-prerequisites
	for m in $(TEST_MODULES); do \
		FENCEGATE_TEST_BINARY=$(CURDIR)/bin/fencegate go -C $$m test $(GO_TEST_FLAGS) -race ./...; \
	done

# make test-unit runs every test that starts no process it would wait on
# (no control plane, etcd, node or pinned tool: each such test skips under
# -short, test/cluster.SkipShort) and reaches no network: the modules are
# downloaded first, and the tests run with GOPROXY=off. It needs no tool
# and no root, and builds without -race. The randomized safety checker
# plays UNIT_SAFETY_RUNS histories (make test 20, make safety 200).
UNIT_TEST_FLAGS  := -short -timeout 10m -ldflags=-w
UNIT_SAFETY_RUNS ?= 3

.PHONY: test-unit
test-unit: ## The fast tier: every test that needs no control plane, tool or network (go test -short).
	go mod download
	for m in $(TEST_MODULES); do go -C $$m mod download; done
	GOPROXY=off FENCEGATE_SAFETY_RUNS=$(UNIT_SAFETY_RUNS) go test $(UNIT_TEST_FLAGS) ./...
	for m in $(TEST_MODULES); do GOPROXY=off go -C $$m test $(UNIT_TEST_FLAGS) ./...; done

.PHONY: test-checks
test-checks: check-tools vet
	nice -n 10 $(MAKE) --no-print-directory verify-generate
	nice -n 10 $(MAKE) --no-print-directory lint-rest

# bin/fencegate, after the tools the tests run.
.PHONY: test-build
test-build: test-tools
	$(MAKE) --no-print-directory build

# The tools the tests run.
.PHONY: test-tools
test-tools:
	$(BUILD_TOOLS) kube etcd helm opa promtool image flux

# controller-gen, which generates the HelmRelease CRD test/actuators holds
# objects under (and verify-generate runs): built beside test-tools at a
# lower priority, in what their builds leave idle, not after them.
.PHONY: test-gen-tools
test-gen-tools:
	nice -n 10 $(BUILD_TOOLS) controller-gen

# The checks' tool that shares few packages with the others: built beside
# test-tools at the lowest priority, little is compiled twice.
.PHONY: check-tools
check-tools:
	nice -n 19 $(BUILD_TOOLS) golangci-lint

.PHONY: run
run: ## Two clusters and a fence authority on this machine: watch a failover (FENCEGATE_DEMO_EXIT=1 exits after it).
	$(BUILD_TOOLS) kube etcd
	@$(MAKE) --no-print-directory build
	go build -o bin/fencegate-demo ./test/demo
	@# The walkthrough runs as its own binary, not under go run, so that
	@# Ctrl-C reaches it directly, without a go command in between.
	bin/fencegate-demo --fencegate bin/fencegate

# make bench writes reports/bench-<stamp>.txt (what the go test lines
# print, as they print it), .json (the side-by-side run's measurements) and
# .html (their cost curves, test/bench/report); the side-by-side run's
# Markdown report is reports/bench-<its start time>.md.
bench: BENCH_OUT := reports/bench-$(shell date +%Y%m%d-%H%M%S)
.PHONY: bench
bench: ## Go benchmarks of the hot paths, then fencegate's webhook against OPA's server (report in reports/).
	$(BUILD_TOOLS) kube etcd opa
	mkdir -p reports
	go test -p 1 -run '^$$' -bench . -skip '^Benchmark(Agents|WatchFanout)$$' -benchmem ./webhook/ ./engine/ ./authority/ | tee -a $(BENCH_OUT).txt
	go -C test/bench test -p 1 -run '^$$' -bench . -benchmem ./sidebyside/ | tee -a $(BENCH_OUT).txt
	go test -p 1 -timeout 30m -run '^$$' -bench '^Benchmark(Agents|WatchFanout)$$' -benchtime 1x ./authority/ | tee -a $(BENCH_OUT).txt
	go test -p 1 -run '^$$' -bench TakeoverPropagation -benchtime 50x ./fenceagent/ | tee -a $(BENCH_OUT).txt
	go test -p 1 -timeout 30m -run '^$$' -bench '^BenchmarkReMark$$' -benchtime 3x ./controller/ | tee -a $(BENCH_OUT).txt
	go test -p 1 -timeout 30m -run '^$$' -bench '^BenchmarkCacheMemory$$' -benchtime 1x ./controller/ | tee -a $(BENCH_OUT).txt
	go test -p 1 -run '^$$' -bench HoldTransition -benchtime 3x ./hold/ | tee -a $(BENCH_OUT).txt
	go test -p 1 -timeout 30m -run '^$$' -bench HoldMixedKinds -benchtime 3x ./test/actuators/ | tee -a $(BENCH_OUT).txt
	go test -p 1 -run '^$$' -bench '^BenchmarkFailover$$' -benchtime 20x ./test/e2e/ | tee -a $(BENCH_OUT).txt
	go test -p 1 -timeout 30m -run '^$$' -bench '^BenchmarkHandover$$' -benchtime 3x ./test/e2e/ | tee -a $(BENCH_OUT).txt
	go test -p 1 -run '^$$' -bench '^BenchmarkServedDomains$$' -benchtime 1x ./test/e2e/ | tee -a $(BENCH_OUT).txt
	go test -p 1 -timeout 30m -run '^$$' -bench '^BenchmarkRunMemory$$' -benchtime 1x ./test/e2e/ | tee -a $(BENCH_OUT).txt
	go test -p 1 -run '^$$' -bench '^BenchmarkWriteLatency$$' -benchtime 1x ./test/e2e/ | tee -a $(BENCH_OUT).txt
	@# The curves are drawn even when the side-by-side run fails (their
	@# captions say which answers failed); make bench fails all the same.
	status=0; go -C test/bench run . -o $(CURDIR)/reports -rates 250,500,1000,2000 -json $(CURDIR)/$(BENCH_OUT).json || status=$$?; \
	go -C test/bench run ./report -in $(CURDIR)/$(BENCH_OUT).txt -sidebyside $(CURDIR)/$(BENCH_OUT).json -o $(CURDIR)/$(BENCH_OUT).html; \
	exit $$status

RUNS ?= 200

.PHONY: safety
safety: ## The randomized failover safety checker, long run (RUNS=200 histories; make test runs 20).
	FENCEGATE_SAFETY_RUNS=$(RUNS) go test -race -count=1 -timeout 120m -run '^TestRandomizedFailover$$' -v ./test/safety/

FUZZTIME ?= 1m

.PHONY: fuzz
fuzz: ## Fuzz every target for FUZZTIME each (their seed corpora run in make test).
	go test -run '^$$' -fuzz '^FuzzAdmit$$' -fuzztime $(FUZZTIME) -parallel 1 ./engine/
	go test -run '^$$' -fuzz '^FuzzReduce$$' -fuzztime $(FUZZTIME) -parallel 1 ./engine/
	go test -run '^$$' -fuzz '^FuzzHandler$$' -fuzztime $(FUZZTIME) -parallel 1 ./webhook/
	go test -run '^$$' -fuzz '^FuzzDeclare$$' -fuzztime $(FUZZTIME) -parallel 1 ./authority/statemachine/
	go test -run '^$$' -fuzz '^FuzzRelease$$' -fuzztime $(FUZZTIME) -parallel 1 ./authority/statemachine/
	go test -run '^$$' -fuzz '^FuzzSequence$$' -fuzztime $(FUZZTIME) -parallel 1 ./authority/statemachine/
	go test -run '^$$' -fuzz '^FuzzRPCs$$' -fuzztime $(FUZZTIME) -parallel 1 ./authority/
	go test -run '^$$' -fuzz '^FuzzAuthorize$$' -fuzztime $(FUZZTIME) -parallel 1 ./authority/authz/

.PHONY: clean
clean: ## Remove build output and the tool cache.
	rm -rf bin reports
	chmod -R u+w $(CACHE) 2>/dev/null || true
	rm -rf $(CACHE)

.PHONY: help
help: ## List the targets.
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

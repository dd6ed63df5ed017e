# ipledger — `make test` is what CI runs; `make run` shows the system working.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
export GOFLAGS ?= -buildvcs=false
# The Go toolchain of go.work and every go.mod (docs/security.md, "Supply chain"): the go command fetches it from the
# module proxy on first use; a machine's own Go (go1.26.8) does not switch by itself. hack/lib/go.sh exports the same
# for the hack/ scripts and .ci/run.
export GOTOOLCHAIN := go1.27.3
# That toolchain's gofmt, not the one on PATH (the machine's Go): its formatting is the one checked.
GOFMT = "$$(go env GOROOT)/bin/gofmt"

TOOLS_BIN = $(shell hack/build-tools.sh)
NODE_BIN = $(shell hack/build-node.sh)
E2E_BIN = $(shell hack/build-e2e.sh)
# Helm v4's CLI (hack/tools/helm), for the tests that render the chart deploy/helm/ipledger; cached apart from TOOLS_BIN.
HELM_DIR = $(shell hack/build-helm.sh)
MODULES := proto pkg lab services/watcher services/ipam services/endpoints services/eipd services/signer plugin test/e2e
# go.work patterns do not cross module boundaries (./services/... matches nothing), so name each module.
PACKAGES := $(addsuffix /...,$(addprefix ./,$(MODULES)))
GO_TEST_FLAGS ?= -count=1 -timeout 30m

.PHONY: help tools proto proto-check vet vulncheck test test-unit test-cluster test-cluster-full cluster-up cluster-down bench images release up down run fmt tidy

help: ## Show the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

tools: ## Build the pinned tools (kube-apiserver, etcd, kubectl, buf, grpcurl, promtool); ~17 min the first time, then cached.
	@hack/build-tools.sh

proto: ## Regenerate the protobuf Go code.
	PATH=$(TOOLS_BIN):$$PATH buf generate

proto-check: ## Fail when buf lint fails or the generated code drifts from the .proto files.
	hack/proto-check.sh

vet: ## go vet every module, and gofmt.
	@test -z "$$($(GOFMT) -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go') | grep -v '\.pb\.go$$' || true)" || { echo "gofmt needed:"; $(GOFMT) -l . | grep -v '\.pb\.go$$'; exit 1; }
	go vet $(PACKAGES) ./test/cluster/...

vulncheck: ## govulncheck over the shipped binaries, offline (a database built from golang.org/x/vulndb); fails on a reachable module vulnerability.
	hack/vulncheck.sh

test: tools proto-check vet vulncheck ## Everything CI runs: proto checks, vet, govulncheck, unit, integration (real API server), manifests, e2e.
	IPLEDGER_TOOLS_BIN=$(TOOLS_BIN) IPLEDGER_HELM_DIR=$(HELM_DIR) go test $(GO_TEST_FLAGS) $(PACKAGES)

test-cluster: tools images ## ipledger as pods on a real single-node cluster (root; lab/cluster): the release directory built for the host (.dev/test-cluster-release), up, installed from it alone, upgraded from 0.2.0 and uninstalled, the previous release (hack/previous-release; images built once per commit) rolled to overlays/e2e, down to it and back, scenarios, down.
	IPLEDGER_TOOLS_BIN=$(TOOLS_BIN) IPLEDGER_NODE_BIN=$(NODE_BIN) IPLEDGER_E2E_BIN=$(E2E_BIN) go test $(GO_TEST_FLAGS) -timeout 50m -v -skip '$(CLUSTER_TWO_NODE_TESTS)' ./test/cluster/...

# Tests that need a second node: test-cluster (one node) leaves them out, test-cluster-full runs them.
CLUSTER_TWO_NODE_TESTS ?= TestPodsAcrossNodes|TestControlPlaneAcrossNodeFailure|TestMetalLBControllerAcrossNodeFailure|TestTrafficAcrossNodeFailure
# The tests of test-cluster-full: those that need a second node, and the node's own checks.
CLUSTER_FULL_TESTS ?= TestPodsAcrossNodes|TestControlPlaneAcrossNodeFailure|TestMetalLBControllerAcrossNodeFailure|TestTrafficAcrossNodeFailure|TestUpstreamLoadBalancerSpecs|TestUpAgainKeepsTheNode|TestTestAddressesStayOnTheMachine

test-cluster-full: tools images ## test-cluster's install on two nodes (IPLEDGER_NODES=2; lab/cluster/nodes.go), then the tests that need them: pods across nodes, the control plane (ipledger's and MetalLB's controller) across a node failure, the upstream specs that need >1 node. By hand, not in .ci/run (CONTRIBUTING.md).
	IPLEDGER_NODES=2 IPLEDGER_TOOLS_BIN=$(TOOLS_BIN) IPLEDGER_NODE_BIN=$(NODE_BIN) IPLEDGER_E2E_BIN=$(E2E_BIN) go test $(GO_TEST_FLAGS) -timeout 90m -v -run '$(CLUSTER_FULL_TESTS)' ./test/cluster/...

cluster-up: tools ## Start the real single-node cluster (root) and import .dev/images if built; kubeconfig in /var/lib/ipledger-node.
	IPLEDGER_TOOLS_BIN=$(TOOLS_BIN) IPLEDGER_NODE_BIN=$(NODE_BIN) go run ./lab/cmd/ipledger-cluster up
	if ls .dev/images/*.tar >/dev/null 2>&1; then IPLEDGER_TOOLS_BIN=$(TOOLS_BIN) IPLEDGER_NODE_BIN=$(NODE_BIN) go run ./lab/cmd/ipledger-cluster import .dev/images; fi

cluster-down: ## Stop the real single-node cluster and remove every trace of it from the machine.
	go run ./lab/cmd/ipledger-cluster down

test-unit: ## The fast layer only: every package with tests and no TestMain (no etcd, kube-apiserver or moto), no tools.
	go test $(GO_TEST_FLAGS) $$(hack/unit-packages.sh $(PACKAGES))

bench: tools ## Benchmarks (BENCHMARKS.md): hack/bench.sh [micro watcher ipam endpoints eipd anchors]; results in .dev/bench/.
	hack/bench.sh $(SUITES)

images: ## Build the container images without Docker: OCI archives .dev/images/ipledger-<service>.tar of ghcr.io/ipledger/<service>:dev.
	go run ./lab/cmd/ipledger-images

release: tools ## One release's artifacts in .dev/release/v<VERSION>: installs pinned by digest, the Helm chart, amd64+arm64 images, SBOMs, kubectl-ipledger archives + krew manifest, SHA256SUMS (docs/install.md).
	IPLEDGER_TOOLS_BIN=$(TOOLS_BIN) go run ./lab/cmd/ipledger-release $(RELEASE_FLAGS)

up: tools ## Start the local system (etcd, kube-apiserver, moto, the four services) in the background.
	go run ./lab/cmd/ipledger-dev up

down: ## Stop the local system.
	go run ./lab/cmd/ipledger-dev down

run: up ## Start the local system, run the demo, then follow the logs (Ctrl-C stops following; `make down` stops all).
	hack/demo.sh
	go run ./lab/cmd/ipledger-dev logs -f

fmt: ## gofmt every Go file.
	$(GOFMT) -w $$(find . -name '*.go' -not -name '*.pb.go' -not -path './.dev/*')

tidy: ## go mod tidy in every module (hack/tools too).
	for m in $(MODULES) test/cluster hack/tools hack/tools/promtool hack/tools/coredns hack/tools/vuln hack/tools/sbom hack/tools/helm; do (cd $$m && GOWORK=off go mod tidy); done

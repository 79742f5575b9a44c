# fleetwatch — see README.md. Every target works on a fresh machine with Go: the test
# control planes (kube-apiserver, etcd) are built from Go modules by hack/build-tools.sh
# and cached outside the repo.

GO        ?= go
BIN       ?= bin
# The root module's tags are vX.Y.Z; mcprovider's, mcprovider/vX.Y.Z, are not the binary's.
VERSION   ?= $(shell git describe --tags --match 'v[0-9]*' --always --dirty 2>/dev/null || echo dev)
# The root module is built, vetted and unit-tested alone (GOWORK=off), with the versions
# of its go.mod, which are those its users get; the modules nested in it require it by
# version and build against the work tree through the workspace (go.work).
ROOT_GO    = GOWORK=off $(GO)
# Packages with concurrency run their unit tests with the race detector.
UNIT_PKGS  = $(shell $(ROOT_GO) list ./... | grep -v /test/e2e)
E2E_PKGS   = ./test/e2e/...
# Modules nested in the repository with a go.mod of their own, which the root's ./...
# skips: the multicluster-runtime provider and its example (controller-runtime stays out
# of the root go.mod). lint and test cover them too.
NESTED_MODULES = mcprovider examples/multicluster-runtime
# The release tooling (hack/release): a module of its own, outside the workspace, whose
# TestOutsideModule builds a module outside the repository that requires fleetwatch's by
# version from a file GOPROXY of the work tree. Its first run compiles controller-runtime
# and Kubernetes' client once more, with -trimpath (a few minutes on 2 cores), later
# runs only what changed.
RELEASE_DIR = hack/release
# The container image builder (hack/image): a module of its own outside the workspace, so
# that go-containerregistry stays out of fleetwatch's go.mod. make image writes the image,
# for IMAGE_PLATFORMS, as an OCI image layout in IMAGE_LAYOUT, without Docker.
IMAGE_DIR        = hack/image
IMAGE_LAYOUT    ?= $(BIN)/image
IMAGE_PLATFORMS ?= linux/amd64,linux/arm64
# The Helm chart's module (deploy/helm): its tests lint and render the chart with Helm's
# Go module and compare it with the kustomize manifests, outside the workspace, so that
# Helm stays out of every other go.mod. test-e2e applies its renderings (test/e2e).
HELM_DIR = deploy/helm
# The modules outside the workspace, built, linted and tidied with GOWORK=off and the
# versions of their own go.mod.
OUTSIDE_MODULES = $(RELEASE_DIR) $(IMAGE_DIR) $(HELM_DIR)
# The API check of make lint: apidiff of the public packages against the last release
# (hack/release/apicheck.sh).
APIDIFF ?= golang.org/x/exp/cmd/apidiff@v0.0.0-20261113113407-e3970619a1a4
# go mod tidy ignores go.work: the modules that require fleetwatch's by version are tidy
# against the last release, which hack/release/baseline.sh serves (after an eval of its
# --print).
RELEASE_TIDY = GOPROXY="$$FLEETWATCH_RELEASE_PROXY,$$($(GO) env GOPROXY)" GONOSUMDB=github.com/fleetwatch/fleetwatch $(GO) mod tidy
E2E_FLAGS ?= -race -timeout 30m
# The browser tests are a module of their own (test/browser), so that chromedp stays out
# of fleetwatch's go.mod.
BROWSER_DIR    = test/browser
BROWSER_FLAGS ?= -race -timeout 10m
FUZZTIME  ?= 30s
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
BENCH     ?= .
BENCHTIME ?= 1s
COUNT     ?= 5
BENCH_DIR ?= $(HOME)/.cache/fleetwatch/bench
BENCH_FLAGS       ?= --pods 10000 --configmaps 3000 --clusters 3 --runs 3 --write-duration 60s --scale 1,3,10,30 --scale-namespaces 3 --shards 3 --many 10,100,1000,10000 --small-pods 5000
BENCH_QUICK_FLAGS ?= --pods 300 --configmaps 100 --clusters 3 --runs 2 --write-rate 30 --write-duration 5s --scale 1,6 --shards 3 --many 10,30 --small-pods 100
# The smoke test of make test: bench-quick's sizes, one run, in a temporary directory.
BENCH_SMOKE_FLAGS ?= $(BENCH_QUICK_FLAGS) --runs 1 --check

.PHONY: all build image tools test test-unit test-e2e test-browser test-bench lint fmt tidy demo bench bench-quick bench-many bench-small bench-go bench-read fuzz clean

all: lint build test

build:
	$(ROOT_GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN)/fleetwatch ./cmd/fleetwatch

## image: the container image for linux/amd64 and linux/arm64, as an OCI image layout in
## IMAGE_LAYOUT (bin/image), built from Go without Docker (hack/image); docs/deploy.md
## says how to push it
image:
	cd $(IMAGE_DIR) && GOWORK=off $(GO) run . -out $(abspath $(IMAGE_LAYOUT)) -repo $(CURDIR) -version $(VERSION) -platforms $(IMAGE_PLATFORMS)

## tools: build (once) the kube-apiserver, etcd and kubectl that tests and the demo use
tools:
	@hack/build-tools.sh

## test: unit tests (with -race), end-to-end tests against real local clusters (the
## container image's binary among them), the web page in a real headless Chromium, and
## the benchmark harness's smoke test
test: tools test-unit test-e2e test-browser test-bench

test-unit:
	$(ROOT_GO) test -race -count=1 $(UNIT_PKGS)
	@# The fleet's and the server's tests once more over compact fleets, as cache.encoding
	@# compact and the Manager's default run them; the Manager's over plain fleets.
	FLEETWATCH_TEST_CACHE_ENCODING=compact $(ROOT_GO) test -race -count=1 ./aggregate/ ./server/
	FLEETWATCH_TEST_CACHE_ENCODING=objects $(ROOT_GO) test -race -count=1 .
	@for m in $(NESTED_MODULES); do \
		echo "test-unit $$m"; (cd $$m && $(GO) test -race -count=1 $$($(GO) list ./... | grep -v /test/e2e)) || exit 1; \
	done
	cd $(RELEASE_DIR) && GOWORK=off $(GO) test -count=1 -timeout 30m ./...
	cd $(IMAGE_DIR) && GOWORK=off $(GO) test -count=1 ./...
	cd $(HELM_DIR) && GOWORK=off $(GO) test -count=1 ./...

## test-e2e: the end-to-end tests; the image that make image builds is among what they
## run (TestImage), and hack/image's TestLayout checks it
test-e2e: tools image
	@eval "$$(hack/build-tools.sh --print)" && export FLEETWATCH_KUBE_APISERVER FLEETWATCH_ETCD FLEETWATCH_KUBECTL && \
		export FLEETWATCH_IMAGE_LAYOUT=$(abspath $(IMAGE_LAYOUT)) && \
		(cd $(IMAGE_DIR) && GOWORK=off $(GO) test -count=1 -run '^TestLayout$$' ./...) && \
		$(GO) test -count=1 $(E2E_FLAGS) $(E2E_PKGS) && \
		FLEETWATCH_CACHE_ENCODING=objects $(GO) test -count=1 $(E2E_FLAGS) -run '^TestDaemonWithKubectl$$' ./test/e2e/ && \
		cd mcprovider && $(GO) test -count=1 $(E2E_FLAGS) ./test/e2e/...

## test-browser: the web page of `fleetwatch serve` in a headless Chromium (installed by
## hack/install-chromium.sh where it is missing), against real local clusters
test-browser: tools
	@hack/install-chromium.sh
	@eval "$$(hack/build-tools.sh --print)" && export FLEETWATCH_KUBE_APISERVER FLEETWATCH_ETCD FLEETWATCH_KUBECTL && \
		cd $(BROWSER_DIR) && $(GO) test -count=1 $(BROWSER_FLAGS) ./...

## test-bench: make bench-quick once, failing if its report lacks a row or a measurement
## (--check; no ratio is asserted): every contender and table of make bench still runs
test-bench: tools
	@eval "$$(hack/build-tools.sh --print)" && export FLEETWATCH_KUBE_APISERVER FLEETWATCH_ETCD FLEETWATCH_KUBECTL && \
		$(GO) run ./test/bench $(BENCH_SMOKE_FLAGS) >/dev/null

## lint: vet, staticcheck, gofmt and tidy go.mod files in every module, and the API
## check against the last release (hack/release/apicheck.sh); `helm lint` of the chart is
## a test of deploy/helm (make test-unit)
lint:
	$(ROOT_GO) vet ./...
	$(ROOT_GO) run $(STATICCHECK) ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@cd hack/tools/kube-apiserver && GOWORK=off $(GO) mod verify >/dev/null
	@$(ROOT_GO) mod tidy -diff
	@eval "$$(hack/release/baseline.sh --print)" && \
	for m in $(NESTED_MODULES) $(BROWSER_DIR); do \
		echo "lint $$m"; (cd $$m && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./... && \
			$(RELEASE_TIDY) -diff) || exit 1; \
	done
	@for m in $(OUTSIDE_MODULES); do \
		echo "lint $$m"; (cd $$m && GOWORK=off $(GO) vet ./... && GOWORK=off $(GO) run $(STATICCHECK) ./... && \
			GOWORK=off $(GO) mod tidy -diff) || exit 1; \
	done
	@APIDIFF=$(APIDIFF) hack/release/apicheck.sh

fmt:
	gofmt -w $$(git ls-files '*.go')

## tidy: go mod tidy in every module; those that require fleetwatch's by version against
## the last release, as make lint checks them (go mod tidy ignores go.work)
tidy:
	$(ROOT_GO) mod tidy
	@eval "$$(hack/release/baseline.sh --print)" && \
	for m in $(NESTED_MODULES) $(BROWSER_DIR); do \
		echo "tidy $$m"; (cd $$m && $(RELEASE_TIDY)) || exit 1; \
	done
	@for m in $(OUTSIDE_MODULES); do \
		echo "tidy $$m"; (cd $$m && GOWORK=off $(GO) mod tidy) || exit 1; \
	done

## demo: 3 local clusters with sample workloads and fleetwatch serving them (Ctrl-C stops everything)
demo: tools build
	@eval "$$(hack/build-tools.sh --print)" && export FLEETWATCH_KUBE_APISERVER FLEETWATCH_ETCD FLEETWATCH_KUBECTL && \
		$(GO) run ./hack/demo --fleetwatch $(BIN)/fleetwatch

## bench: fleetwatch next to client-go informers (dynamic, with the managedFields transform,
## typed, metadatainformer), and examples/multicluster-runtime on multicluster-runtime's
## kubeconfig provider next to fleetwatch's, and the binary as 3 sharded replicas (moves with and
## without the warm handover, fan-out lists), on real local clusters (~20 min); writes
## docs/benchmarks.md. The loaded clusters are kept in BENCH_DIR for the next invocation.
bench: tools
	@eval "$$(hack/build-tools.sh --print)" && export FLEETWATCH_KUBE_APISERVER FLEETWATCH_ETCD FLEETWATCH_KUBECTL && \
		$(GO) run ./test/bench $(BENCH_FLAGS) --dir $(BENCH_DIR) --out docs/benchmarks.md

## bench-quick: the same harness with small sizes (a couple of minutes), results on stdout
bench-quick: tools
	@eval "$$(hack/build-tools.sh --print)" && export FLEETWATCH_KUBE_APISERVER FLEETWATCH_ETCD FLEETWATCH_KUBECTL && \
		$(GO) run ./test/bench $(BENCH_QUICK_FLAGS) --dir $(BENCH_DIR)

## bench-many: the many-clusters table alone (fleetwatch serve and typed informers at 10 to
## 1,000 contexts over 3 apiservers of their own), results on stdout
bench-many: tools
	@eval "$$(hack/build-tools.sh --print)" && export FLEETWATCH_KUBE_APISERVER FLEETWATCH_ETCD FLEETWATCH_KUBECTL && \
		$(GO) run ./test/bench --many-only --many 10,100,1000 --dir $(BENCH_DIR)

## bench-small: the small-pods table alone (the library's plain and compact fleets and
## fleetwatch serve against typed informers, 3 clusters × 5,000 pods of about 1 KB), results
## on stdout
bench-small: tools
	@eval "$$(hack/build-tools.sh --print)" && export FLEETWATCH_KUBE_APISERVER FLEETWATCH_ETCD FLEETWATCH_KUBECTL && \
		$(GO) run ./test/bench --small-only --small-pods 5000 --dir $(BENCH_DIR)

## bench-go: the Go micro-benchmarks of the federated cache, next to client-go's indexer, of
## the server's list pages and its heap beyond the fleet, and of the search index
bench-go:
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchtime $(BENCHTIME) -count $(COUNT) -benchmem ./aggregate/... ./server/... ./search/...

## bench-read: the read micro-benchmarks of issue #37 (mcprovider's BenchmarkRead): Get and
## List of a Pod from controller-runtime's cache (with and without its DeepCopy), client-go's
## lister with a DeepCopy, the plain and compact fleets untyped and typed, and mcprovider's
## cache, on the large and small pods of make bench in real local clusters, COUNT times
## (a few minutes each); run it under nice -n -20 on a shared machine
bench-read:
	cd mcprovider && $(GO) test -run '^$$' -bench '^BenchmarkRead$$' -benchtime $(BENCHTIME) -count $(COUNT) -benchmem -timeout 120m .

## fuzz: run each fuzz target for FUZZTIME
fuzz:
	@for pkg in $$($(GO) list ./...); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
			echo "fuzz $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
		done; \
	done

clean:
	rm -rf $(BIN)

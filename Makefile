# fleetwatch — see README.md. Every target works on a fresh machine with Go: the test
# control planes (kube-apiserver, etcd) are built from Go modules by hack/build-tools.sh
# and cached outside the repo.

GO        ?= go
BIN       ?= bin
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# Packages with concurrency run their unit tests with the race detector.
UNIT_PKGS  = $(shell $(GO) list ./... | grep -v /test/e2e)
E2E_PKGS   = ./test/e2e/...
E2E_FLAGS ?= -race -timeout 30m
FUZZTIME  ?= 30s
BENCH     ?= .
BENCHTIME ?= 1s
COUNT     ?= 5

.PHONY: all build tools test test-unit test-e2e lint fmt demo bench fuzz clean

all: lint build test

build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN)/fleetwatch ./cmd/fleetwatch

## tools: build (once) the kube-apiserver and etcd that tests and the demo run
tools:
	@hack/build-tools.sh

## test: unit tests (with -race) and end-to-end tests against real local clusters
test: tools test-unit test-e2e

test-unit:
	$(GO) test -race -count=1 $(UNIT_PKGS)

test-e2e: tools
	@eval "$$(hack/build-tools.sh --print)" && export FLEETWATCH_KUBE_APISERVER FLEETWATCH_ETCD && \
		$(GO) test -count=1 $(E2E_FLAGS) $(E2E_PKGS)

lint:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@cd hack/tools/kube-apiserver && $(GO) mod verify >/dev/null
	@$(GO) mod tidy -diff

fmt:
	gofmt -w $$(git ls-files '*.go')

## demo: start 3 local clusters with sample workloads (Ctrl-C stops everything)
demo: tools
	@eval "$$(hack/build-tools.sh --print)" && export FLEETWATCH_KUBE_APISERVER FLEETWATCH_ETCD && \
		$(GO) run ./hack/demo

## bench: benchmarks, fleetwatch next to plain client-go
bench:
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchtime $(BENCHTIME) -count $(COUNT) -benchmem ./aggregate/...

## fuzz: run each fuzz target for FUZZTIME
fuzz:
	@for pkg in $$($(GO) list ./...); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
			echo "fuzz $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
		done; \
	done

clean:
	rm -rf $(BIN)

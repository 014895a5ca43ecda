# infergate — the two commands a new user needs are `make run` and `make test`.
SHELL := /bin/bash
GO    ?= go
BIN   := bin
export PATH := /usr/local/go/bin:$(PATH)

# Packages whose tests share state across goroutines run under the race detector.
TEST_FLAGS ?= -race -count=1 -timeout 15m

.PHONY: all build run demo test bench bench-routing presubmit fmt vet deps clean

all: build

deps:
	@.ci/ensure-packages run

build: deps
	$(GO) build -o $(BIN)/infergate ./cmd/infergate

## run: install missing system packages, build, start the gateway with the demo.
run: build
	$(BIN)/infergate demo --state-dir .state

## test: the full suite (unit, race, fuzz seeds, end-to-end incl. headless Chromium).
test:
	@.ci/ensure-packages test
	$(GO) vet ./...
	$(GO) test $(TEST_FLAGS) ./...

## bench: Go benchmarks for the hot paths, then the proxy load comparison.
bench:
	@.ci/ensure-packages bench
	$(GO) test -run '^$$' -bench . -benchmem ./...
	test/bench/proxy.sh
	test/bench/upload_rss.sh
	test/bench/tls.sh

## bench-routing: routing quality (TTFT, hit rate, goodput per arm) on a simulated
## 8-engine fleet behind the built gateway; < 10 min, BENCH_SHORT=1 ≈ 2 min.
## Tables on stdout, raw results in test/bench/results/ (docs/performance.md).
bench-routing: deps
	$(GO) build -o $(BIN)/infergate ./cmd/infergate
	$(GO) build -o $(BIN)/enginesim ./test/enginesim/cmd/enginesim
	$(GO) build -o $(BIN)/routebench ./test/bench/routebench
	$(BIN)/routebench --gateway $(BIN)/infergate --enginesim $(BIN)/enginesim $(ROUTEBENCH_ARGS)

fmt:
	gofmt -w $$(git ls-files '*.go')

vet:
	$(GO) vet ./...

## presubmit: what CI runs, plus a formatting check.
presubmit:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	$(MAKE) test

clean:
	rm -rf $(BIN) .state

# infergate — the two commands a new user needs are `make run` and `make test`.
SHELL := /bin/bash
GO    ?= go
BIN   := bin
export PATH := /usr/local/go/bin:$(PATH)

# Packages whose tests share state across goroutines run under the race detector.
TEST_FLAGS ?= -race -count=1 -timeout 25m

# The version stamped into the binary (infergate version, GET /version,
# infergate_build_info). Without git (a source tarball) the binary falls back
# to the VCS stamps Go records, else "dev".
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)
COMMIT  ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null)
PKG_BUILDINFO := github.com/infergate/infergate/buildinfo
LDFLAGS := -X $(PKG_BUILDINFO).version=$(VERSION) -X $(PKG_BUILDINFO).commit=$(COMMIT)

# make release: versioned binaries and their checksums under dist/. The
# binary links libzmq through cgo (github.com/pebbe/zmq4), so it is built for
# the host's OS/arch only: cross-compiling needs a C cross toolchain and
# libzmq built for the target (set GOARCH, CC and PKG_CONFIG_PATH yourself);
# building on each target arch (or in the Dockerfile per platform) is the
# supported way.
DIST        := dist
GOOS_HOST   := $(shell $(GO) env GOOS)
GOARCH_HOST := $(shell $(GO) env GOARCH)
RELEASE_BIN := infergate-$(or $(VERSION),dev)-$(GOOS_HOST)-$(GOARCH_HOST)

.PHONY: all build run demo test bench bench-routing presubmit fmt vet deps clean release

all: build

deps:
	@.ci/ensure-packages run

build: deps
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/infergate ./cmd/infergate

## release: dist/infergate-<version>-<os>-<arch> (trimmed paths, stamped) and dist/SHA256SUMS.
release: deps
	@mkdir -p $(DIST)
	CGO_ENABLED=1 $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" -o $(DIST)/$(RELEASE_BIN) ./cmd/infergate
	cd $(DIST) && sha256sum infergate-* > SHA256SUMS
	@cat $(DIST)/SHA256SUMS

## run: install missing system packages, build, start the gateway with the demo.
run: build
	$(BIN)/infergate demo --state-dir .state

## test: the full suite (unit, race, fuzz seeds, end-to-end incl. headless Chromium).
# make test runs the suite under -race, then the datapath's socket packages
# once more without it: race builds keep net.Conn's path (sockio's raw socket
# calls are off under -race), so the raw paths the daemon runs — serving inside
# the client's read wait, the SSE relay inside the engine's — are tested too,
# and the framing differential against nginx runs on the path the daemon serves.
test:
	@.ci/ensure-packages test
	$(GO) vet ./...
	$(GO) test $(TEST_FLAGS) ./...
	$(GO) test $(TEST_FLAGS) ./datapath -args -frontend=net/http
	$(GO) test -count=1 -timeout 15m ./datapath ./datapath/h1 ./datapath/sockio ./datapath/upstream ./internal/rawsock ./enginestats ./test/framingdiff

## bench: Go benchmarks for the hot paths, then the proxy load comparison and
## the instructions per request (irpr.sh) and per relayed SSE event (irsse.sh).
bench:
	@.ci/ensure-packages bench
	$(GO) test -run '^$$' -bench . -benchmem ./...
	test/bench/proxy.sh
	test/bench/irpr.sh
	test/bench/irsse.sh
	test/bench/upload_rss.sh
	test/bench/tls.sh

## bench-routing: routing quality (TTFT, hit rate, goodput per arm) on a simulated
## 8-engine fleet behind the built gateway; < 10 min, BENCH_SHORT=1 ≈ 2 min.
## Tables on stdout, raw results in test/bench/results/ (docs/performance.md).
bench-routing: deps
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./cmd/infergate ./test/enginesim/cmd/enginesim ./test/bench/routebench
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
	rm -rf $(BIN) $(DIST) .state

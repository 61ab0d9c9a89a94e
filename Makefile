# rbdfence: the Ceph 16 (Pacific) build tag is set here once, so that
# `make build` and `make test` need no flags.
GO        ?= go
TAGS      := pacific
BIN       := bin
VERSION   := $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X main.version=$(VERSION)
GOFLAGS_CGO := -tags $(TAGS) -ldflags '$(LDFLAGS)'
# Front-end drivers are pure Go: a front-end may have no librados.
CGO_PKGS  := ./cmd/... $(if $(wildcard hooks/*/main.go),./hooks/...)
PURE_PKGS := $(if $(wildcard drivers/*/main.go),./drivers/...)
FUZZTIME  ?= 30s

.PHONY: all build deps test test-clean unit vet demo demo-opennebula bench fuzz clean cluster-up cluster-down package

all: build

deps:
	bash test/deps.sh
	$(GO) mod download

build:
	@mkdir -p $(BIN)
	$(GO) build $(GOFLAGS_CGO) -o $(BIN)/ $(CGO_PKGS)
	$(if $(PURE_PKGS),CGO_ENABLED=0 $(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ $(PURE_PKGS))

# package: .deb and .rpm of rbdfence, rbdfence-frontend and rbdfence-host in dist/.
package: build
	bash packaging/package.sh --out dist

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet -tags $(TAGS) ./...
	@! git grep -n -E 't\.Skip(f|Now)?\(' -- '*_test.go' || { echo "tests must not skip: real parts are started by the tests"; exit 1; }

# unit: fast tests that need no cluster: every internal package but the Ceph
# adapter (whose tests run against the real test cluster).
unit:
	$(GO) test -tags $(TAGS) -count=1 $$($(GO) list -tags $(TAGS) ./internal/... | grep -v '/internal/ceph$$')

# test: every test, real Ceph, libvirt, QEMU, sshd included (the tests start
# them under /tmp/rbdfence-test, ports 16780-16799), with every fuzz target for
# a fixed number of executions beside them; then everything the run started is stopped and
# removed, and a leftover fails the run (test/run.sh, test/machine.sh).
# RBDFENCE_TEST_KEEP=1 keeps the daemons for the next run; make test-clean.
test: deps vet build
	GO=$(GO) bash test/run.sh

test-clean:
	f=$$(mktemp /tmp/rbdfence-machine.XXXXXX) && bash test/machine.sh snapshot $$f && bash test/machine.sh teardown $$f; rm -f $$f $$f.strays

# fuzz: exploration, FUZZTIME per target (make test runs fixed execution counts).
fuzz:
	bash test/fuzz.sh $(FUZZTIME)

# model: the model-based test of the claim protocol, TestModel at its larger
# bound (go test runs the CI bound), then the worlds and the mutants as go
# test runs them; prints states, bounds, time, each mutant's trace and every
# violation's.
.PHONY: model
model:
	RBDFENCE_MODEL=large $(GO) test -tags $(TAGS) -count=1 -timeout 90m -run 'TestModel' -v ./internal/engine/

# The demo installs only its own packages (test/deps.sh --demo), not the
# tests' (OpenNebula's build, libvirt, linters), and builds only the CLI it
# runs (test/demo.sh builds its zombie), not every binary.
demo:
	bash test/deps.sh --demo
	@mkdir -p $(BIN)
	$(GO) build $(GOFLAGS_CGO) -o $(BIN)/ ./cmd/rbdfence
	bash test/demo.sh

# The OpenNebula story (test/demo-opennebula.sh): every test dependency,
# OpenNebula 7.4.0 built once, a front-end, two hosts and Ceph.
demo-opennebula: deps build
	bash test/demo-opennebula.sh

# bench: rbdfence check against its baselines on the test cluster (about a
# minute). bench-oned: what rbdfence (local actions and hook) adds to a real
# deploy and live migration under OpenNebula 7.4.0's own oned, against the
# same oned without it (test/bench/onedbench, ONED_ROUNDS rounds with
# oned's ssh ONED_SSH: plain, mux (the packages' multiplexing) or both; about a
# minute plus 65 s a round and ssh mode on 2 cores (a 2 s pause before each
# timed operation; a deploy is also timed from BOOT), root, the test/oned stack:
# hold /tmp/rbdfence-machine.lock on a shared machine); it stops what it
# started (make test-clean) whatever its result. Separate targets: the oned
# one takes the machine's bridge, namespaces and test ports for about 11 minutes a mode (10 rounds).
# ONED_TRACE=N adds, after each mode's rounds, N rounds under perf (a
# deploy and a live migration per flavour): where the time goes, per
# process, and the VMM action's time by flavour, without PROLOG's noise.
# docs/PERFORMANCE.md has the figures of both.
ONED_ROUNDS ?= 10
ONED_SSH ?= both
ONED_TRACE ?=
.PHONY: bench-oned
bench: deps build
	$(GO) run -tags $(TAGS) ./test/bench/checkbench

bench-oned: deps build
	$(GO) run -tags $(TAGS) ./test/bench/onedbench -rounds $(ONED_ROUNDS) -ssh $(ONED_SSH) $(if $(ONED_TRACE),-trace $(ONED_TRACE)); rc=$$?; $(MAKE) --no-print-directory test-clean; exit $$rc

cluster-up:
	bash test/ceph/cluster.sh start

cluster-down:
	bash test/ceph/cluster.sh stop

clean:
	rm -rf $(BIN) dist

# soak: random lifecycles with faults on the real oned 7.4.0 (test/oned
# TestSoak alone, host faults on), judged after every step by what QEMU
# shows; make test runs a short one (10 steps, 2 VMs, seed 1, no host
# faults). SEED, STEPS, VMS, HOST_FAULTS (0: none); DURATION (e.g. 60m)
# runs steps until then. A failure prints the seed
# and its steps: make soak SEED=... STEPS=... replays it.
SEED ?= 1
STEPS ?= 40
VMS ?= 6
DURATION ?=
HOST_FAULTS ?= 1
.PHONY: soak
soak: deps build
	RBDFENCE_SOAK_SEED=$(SEED) RBDFENCE_SOAK_STEPS=$(STEPS) RBDFENCE_SOAK_VMS=$(VMS) RBDFENCE_SOAK_DURATION=$(DURATION) RBDFENCE_SOAK_HOST_FAULTS=$(HOST_FAULTS) \
		$(GO) test -tags $(TAGS) -count=1 -timeout 0 -v -run '^TestSoak$$' ./test/oned; rc=$$?; $(MAKE) --no-print-directory test-clean; exit $$rc

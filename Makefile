# trellis-proxy: see README.md. `make run` and `make test` install what they need.
GO        ?= go
BIN       := bin/trellis-proxy
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X main.version=$(VERSION)
TESTFLAGS ?= -race -timeout 20m
FUZZTIME  ?= 20s

.PHONY: all build run test unit lint deps fuzz golden bench bench-passthrough bench-engine bench-joins bench-bulk clients docker prereqs clean

all: build

prereqs:
	@command -v $(GO) >/dev/null || { echo "error: Go 1.26 is required (https://go.dev/dl)" >&2; exit 1; }
	@./scripts/ensure-postgres.sh

build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/trellis-proxy

# The embedded default: a private PostgreSQL cluster and the proxy in front of it.
run: prereqs build
	./$(BIN)

# Everything CI runs: formatting, vet, the import rule, and every test with -race.
test: prereqs lint deps
	$(GO) test $(TESTFLAGS) ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# The package rule of docs/architecture: fails on a forbidden import.
deps:
	@$(GO) run ./internal/depcheck

fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test $$pkg -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) || exit 1; \
	  done; \
	done

golden:
	$(GO) test ./grammar/... -update

# Everything the benchmark spec measures here: B1 (the relay), then the
# engine's B2-B10 and DDL latency, then the JOIN targets' J1-J5 (about 40
# minutes on the 2-core box).
bench: bench-passthrough bench-engine bench-joins

bench-passthrough: prereqs build
	@./scripts/ensure-postgres.sh pgbouncer
	$(GO) run ./cmd/trellis-bench passthrough

# B2, B6, B7, B8, B9, B10, the self-check under writes and the bulk drain
# (issue 18, ~30 min of the run) against the in-process engine, and the DDL
# latency through the proxy (docs/benchmarks-engine.md); BENCHFLAGS=-quick
# for a smoke run of a few minutes.
bench-engine: prereqs build
	$(GO) run ./cmd/trellis-bench $(BENCHFLAGS) write-tax group-contention hop-ladder poisoned-key backfill idle-cost memory apply-latency self-check bulk-drain

# The JOIN benchmarks of the joins spec §7 (J1 build, J2 dimension latency,
# J3 write tax, J5 fan-out cost; J4, pg_ivm, is measured beside the project)
# against the in-process engine, about 12 minutes (docs/benchmarks.md, "JOIN
# targets"). Sizes: TRELLIS_BENCH_J1_FACTS, TRELLIS_BENCH_J2_DIMS,
# TRELLIS_BENCH_J3_FACTS, TRELLIS_BENCH_J5_KEYS and the others listed there.
bench-joins: prereqs
	$(GO) run ./cmd/trellis-bench $(BENCHFLAGS) join-build join-latency join-write-tax join-fanout

# Issue 18 alone: one batch of 100,000 / 1,000,000 / 10,000,000 keys, alone
# and beside a side writer, ~30 min (docs/benchmarks-engine.md "Bulk drain").
bench-bulk: prereqs
	$(GO) run ./cmd/trellis-bench $(BENCHFLAGS) bulk-drain

# Real client suites (pgx's and lib/pq's own tests, node-postgres and
# postgres.js, pgJDBC, psycopg 3) directly and through the proxy; not part of
# `make test` (5-10 minutes). Figures in docs/clients.md. CLIENTSFLAGS
# passes flags, e.g. CLIENTSFLAGS='-suites jdbc,psycopg'.
clients: prereqs build
	@./scripts/clients/install.sh
	$(GO) run ./cmd/trellis-clients $(CLIENTSFLAGS)

docker:
	docker build --build-arg VERSION=$(VERSION) -t trellis-proxy:$(VERSION) .

clean:
	rm -rf bin

# Cellpay. `make run` starts the platform locally; `make test` runs every
# test CI runs. See README.md.

GO       ?= go
BIN      ?= bin
# A count, not a duration: with a wall-clock -fuzztime, Go's fuzz
# coordinator can fail a target with a bare "context deadline exceeded"
# and no crasher when -fuzztime ends under CPU load (golang/go#75804,
# fixed in Go 1.27). 20000 runs is 1-4 s for most targets, about 16 s for
# FuzzProcessStreamOrder, on the CI machine.
FUZZTIME ?= 20000x
# Debian's prometheus package (.ci/run installs it).
PROMTOOL ?= promtool

.PHONY: bench-hops bench-directory bench-callbacks bench-access-points bench-overload bench-trust bench-failover bench-standby bench-refdata soak all build run test test-unit test-e2e fuzz verify k8s-test k8s-envtest k8s-verify monitoring-test monitoring-e2e fmt-check vet lint tidy-check proto proto-check bench bench-e2e clean

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/...
	cd tools/grpcurl && $(GO) build -o $(abspath $(BIN))/grpcurl github.com/fullstorydev/grpcurl/cmd/grpcurl

## run: build everything and start the platform (private Postgres per cell, issuer, 3 cells, GTR).
run: build
	./$(BIN)/cellpay -bin $(BIN)

## test: unit, store, fuzz, end-to-end and manifest tests, with the race detector.
test: test-unit fuzz k8s-test monitoring-test

# The e2e package runs after the others, alone: its platform and the fault
# tests' timing bounds do not share the two cores with the other packages'
# platforms (internal/platform, test/monitoring).
test-unit:
	$(GO) test -race -count=1 -timeout 20m $$($(GO) list ./... | grep -v '/test/e2e$$')
	$(GO) test -race -count=1 -timeout 20m ./test/e2e/...

# A few seconds of each fuzz target over the decoders, validators and
# protocol machines.
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzRequest$$' -fuzztime $(FUZZTIME) ./internal/validate
	$(GO) test -run '^$$' -fuzz '^FuzzValidateKey$$' -fuzztime $(FUZZTIME) ./pkg/idempotency
	$(GO) test -run '^$$' -fuzz '^FuzzMask$$' -fuzztime $(FUZZTIME) ./internal/card
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./internal/refdata
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeMessage$$' -fuzztime $(FUZZTIME) ./internal/refdata
	$(GO) test -run '^$$' -fuzz '^FuzzApply$$' -fuzztime $(FUZZTIME) ./internal/refdata
	$(GO) test -run '^$$' -fuzz '^FuzzAuthorize$$' -fuzztime $(FUZZTIME) ./internal/issuersim
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeEntry$$' -fuzztime $(FUZZTIME) ./internal/partnerstate
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./cmd/gtr/internal/config
	$(GO) test -run '^$$' -fuzz '^FuzzApplyTable$$' -fuzztime $(FUZZTIME) ./cmd/gtr/internal/admin
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeReport$$' -fuzztime $(FUZZTIME) ./cmd/gtr/internal/refwatch
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeRoutingEntry$$' -fuzztime $(FUZZTIME) ./cmd/gtr/internal/routesync
	$(GO) test -run '^$$' -fuzz '^FuzzLoadStateFile$$' -fuzztime $(FUZZTIME) ./cmd/gtr/internal/routesync
	$(GO) test -run '^$$' -fuzz '^FuzzProcessStreamOrder$$' -fuzztime $(FUZZTIME) ./cmd/cell/internal/server
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./cmd/cell/internal/directory
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./internal/partners
	$(GO) test -run '^$$' -fuzz '^FuzzAuthenticate$$' -fuzztime $(FUZZTIME) ./internal/partners
	$(GO) test -run '^$$' -fuzz '^FuzzSteps$$' -fuzztime $(FUZZTIME) ./internal/gtrattempt
	$(GO) test -run '^$$' -fuzz '^FuzzVerify$$' -fuzztime $(FUZZTIME) ./pkg/webhook
	$(GO) test -run '^$$' -fuzz '^FuzzCallbackHandler$$' -fuzztime $(FUZZTIME) ./pkg/client
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./internal/cardkeys
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./internal/operators
	$(GO) test -run '^$$' -fuzz '^FuzzFromHeader$$' -fuzztime $(FUZZTIME) ./cmd/gtr/internal/auth

test-e2e:
	$(GO) test -race -count=1 -timeout 15m ./test/e2e/...

## verify: formatting, vet, lint, tidy modules, fresh generated code.
verify: fmt-check vet lint tidy-check proto-check k8s-verify

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

lint:
	$(GO) tool -modfile=tools/go.mod staticcheck ./...

tidy-check:
	@t=$$(mktemp -d); cp go.mod go.sum $$t/; $(GO) mod tidy; \
	if ! cmp -s go.mod $$t/go.mod || ! cmp -s go.sum $$t/go.sum; then \
	  diff -u $$t/go.mod go.mod; cp $$t/go.mod $$t/go.sum .; rm -rf $$t; \
	  echo "go.mod/go.sum are not tidy: run go mod tidy"; exit 1; fi; rm -rf $$t

proto:
	./scripts/protogen.sh

proto-check: proto
	@if [ -n "$$(git status --porcelain -- pkg proto)" ]; then git status --porcelain -- pkg proto; echo "generated code is stale: run make proto and commit"; exit 1; fi

## bench: Go benchmarks (routing hot path and friends).
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/routing/ ./internal/orchestrator/

## bench-e2e: the platform benchmarks of BENCHMARKS.md (minutes; not part of make test).
bench-e2e:
	./scripts/bench-e2e.sh

bench-directory:
	./scripts/bench-directory.sh

## k8s-test: render every overlay, decode strictly, check probes, limits, policies (deploy/k8s/check).
k8s-test:
	cd deploy/k8s/check && $(GO) test -count=1 ./...

## monitoring-test: alert rules checked and unit-tested by promtool; rules'
## and dashboards' metric names checked against the code (deploy/monitoring).
monitoring-test:
	@command -v $(PROMTOOL) >/dev/null || { echo "monitoring-test: $(PROMTOOL) not found: apt-get install prometheus (bash .ci/run installs it)"; exit 1; }
	$(PROMTOOL) check rules deploy/monitoring/rules/cellpay.rules.yaml
	cd deploy/monitoring/rules && $(PROMTOOL) test rules cellpay.rules_test.yaml
	$(GO) test -count=1 ./deploy/monitoring

## monitoring-e2e: a real Prometheus with the project's rules over a platform
## started as make run does (an alert fires and resolves), and one trace
## across the GTR, a cell and the issuer (test/monitoring; about 2 minutes).
monitoring-e2e:
	$(GO) test -race -count=1 -timeout 10m ./test/monitoring/...

## k8s-envtest: server-side dry run of every overlay against a real kube-apiserver and etcd (built once, cached).
k8s-envtest:
	./scripts/k8s-envtest.sh

k8s-verify:
	cd deploy/k8s/check && $(GO) vet ./... && $(GO) vet -tags envtest ./... && $(GO) mod tidy -diff

## bench-failover: kill -9 a cell under load; detection time, p99 and throughput around it.
bench-failover:
	CELLPAY_FAILOVER_BENCH=1 $(GO) test -count=1 -timeout 10m -run '^TestFailoverBenchmark$$' -v ./test/e2e/

## bench-standby: a synchronous standby's cost (closed loop, sync vs async vs none, one run) and the launcher's failover time after kill -9 of a primary.
bench-standby:
	CELLPAY_STANDBY_BENCH=1 $(GO) test -count=1 -timeout 10m -run '^TestStandbyBenchmark$$' -v ./test/e2e/

## bench-overload: saturation (closed loop, 32 to 1,024 workers), then 2.5x it for 10 s, then 100 tx/s, with admission control as shipped, an alternative (CELLPAY_OVERLOAD_EXP, default the former rule -admission-baseline 0), and none (CELLPAY_OVERLOAD_MODES=on,exp,off picks and orders them); and fairness between partners.
bench-overload:
	CELLPAY_OVERLOAD_BENCH=1 $(GO) test -count=1 -timeout 20m -run '^(TestOverloadBenchmark|TestFairnessBenchmark)$$' -v ./test/e2e/

## bench-access-points: the client's failover between the access points, by strategy: loss to the backup's first answer, calls that waited for the retry.
bench-access-points:
	CELLPAY_AP_BENCH=1 $(GO) test -count=1 -timeout 10m -run '^TestAccessPointBenchmark$$' -v ./test/e2e/

## bench-hops: the cost of mutual TLS and the hops' policies on GTR→cell (in-process GTR, fake cell) and cell→issuer (issuer simulator), plaintext and mTLS side by side in one run.
bench-hops:
	$(GO) test -run '^$$' -bench '^(BenchmarkSubmitOverMTLS|BenchmarkAuthorizeOverMTLS)$$' -benchmem -benchtime 3s -count 5 ./cmd/gtr/internal/payments/ ./internal/issuersim/

## bench-trust: the cost of TLS and partner authentication at the GTR, side by side (in-process GTR, fake cell).
bench-trust:
	CELLPAY_TRUST_BENCH=1 $(GO) test -count=1 -timeout 10m -run '^TestTrustCostBenchmark$$' -v ./cmd/gtr/internal/payments/
	$(GO) test -run '^$$' -bench '^BenchmarkSubmitTrust$$' -benchmem -count 3 ./cmd/gtr/internal/payments/

## bench-refdata: reference data lag at 100 updates/s and throughput while 10k snapshots apply.
bench-refdata:
	CELLPAY_REFDATA_BENCH=1 $(GO) test -count=1 -timeout 15m -run '^TestRefdataBenchmark$$' -v ./test/e2e/

## bench-callbacks: transactions with callbacks delivered and without, side by side, and delivery lag (BENCHMARKS.md).
bench-callbacks:
	CELLPAY_CALLBACK_BENCH=1 $(GO) test -count=1 -timeout 15m -run '^TestCallbackBenchmark$$' -v ./test/e2e/

## soak: the fault tests (kill, Postgres stop, freeze, issuer) at a higher rate for longer.
soak:
	CELLPAY_SOAK_RATE=$${CELLPAY_SOAK_RATE:-150} CELLPAY_SOAK_SECONDS=$${CELLPAY_SOAK_SECONDS:-60} \
	  $(GO) test -count=1 -timeout 60m -run '^TestFault' -v ./test/e2e/

clean:
	rm -rf $(BIN)

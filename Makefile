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
# Debian's prometheus package (make deps installs it).
PROMTOOL ?= promtool

FORCE:
.PHONY: FORCE sim bench-retention bench-hops bench-directory bench-callbacks bench-access-points bench-rest bench-followups bench-overload bench-trust bench-failover bench-standby bench-sitecopy bench-refdata soak all build run deps test test-unit test-e2e fuzz verify norace-check promtool-test k8s-test k8s-envtest k8s-verify monitoring-test monitoring-e2e fmt-check vet lint tidy-check proto proto-check api-check bench bench-e2e clean

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/...
	# The platform's NATS servers: the module's own nats-server, the
	# version of the Kubernetes manifests' image (make run, the tests).
	$(GO) build -o $(BIN)/nats-server github.com/nats-io/nats-server/v2
	cd tools/grpcurl && $(GO) build -o $(abspath $(BIN))/grpcurl github.com/fullstorydev/grpcurl/cmd/grpcurl

## run: build everything and start the platform (private Postgres per cell, issuer, 3 cells, GTR).
## SITES=2 starts two sites instead, site-a on 127.0.1.1 and site-b on 127.0.2.1, an access point and two cells each (docs/operations.md).
run: build
	./scripts/deps.sh run
	./$(BIN)/cellpay -bin $(BIN) $(if $(SITES),-sites $(SITES))

## deps: install what make test needs and this machine lacks (Postgres
## server binaries, nats-server, prometheus, chromium, curl, nodejs and npm with
## the TypeScript client's packages), saying why.
deps:
	./scripts/deps.sh test

## test: unit, store, model, end-to-end and fault, manifests, alert rules,
## console (headless Chromium); fuzz targets' seed corpora replayed. About
## 7 minutes on 2 cores with a warm build cache (up to 12 on a slower host).
test: deps build test-unit test-e2e k8s-test promtool-test

# The tests that start platforms use the binaries make build made
# (testutil.PrebuiltBin) rather than each linking its own.
test-unit test-e2e: export CELLPAY_TEST_BIN = $(abspath $(BIN))

# NORACE: packages with no goroutine of their own (pure state machines and
# their model), whose tests the race detector would slow five to ten times
# and could find nothing in. norace-check (make verify) keeps them so.
NORACE := ./internal/dev/model ./internal/pnr/cellside ./internal/pnr/gtrside ./pkg/routing ./internal/validate ./internal/card ./internal/iso
# PLATFORMS: packages whose tests start platforms or Postgres clusters and
# spend most of their time waiting on them; they run beside the end-to-end
# shards, not among the packages that keep both cores compiling.
PLATFORMS := ./internal/dev/platform ./test/monitoring ./internal/dev/pgcluster
# go test's own vet pass is off: make verify runs go vet on every package.
TESTFLAGS := -count=1 -vet=off
# The module's packages but these (patterns as go list prints them).
others = $$($(GO) list ./... | grep -v -x -F $(foreach p,$(1),-e github.com/cellpay/cellpay/$(p:./%=%)))

# Every package but the end-to-end one and PLATFORMS, with the race
# detector where it instruments code that runs concurrently; fuzz targets
# replay their seed corpora (testdata/fuzz) as plain tests here.
test-unit:
	$(GO) test $(TESTFLAGS) -timeout 10m $(NORACE)
	$(GO) test $(TESTFLAGS) -race -p 3 -timeout 15m $(call others,$(NORACE) $(PLATFORMS) ./test/e2e)

# The end-to-end package as shards run at once, each with a platform of its
# own (test/e2e/shards_test.go, scripts/test-e2e.sh), then the NATS
# cluster's shard alone (its three-server platform and faults overloaded
# two cores beside the others); beside the first three, the
# PLATFORMS packages (-race). The e2e package's code under test runs in the
# platform's processes, built without the race detector, so its test
# process is too: under -race its load generators took CPU from the
# platform they measure (the load tool, client and checker run under -race
# in their own packages).
test-e2e:
	GO=$(GO) E2E_FLAGS="-vet=off" E2E_BESIDE="$(PLATFORMS)" ./scripts/test-e2e.sh
	GO=$(GO) E2E_FLAGS="-vet=off" E2E_SHARDS=nats ./scripts/test-e2e.sh

## sim: the deterministic simulation (cmd/cellpay-sim, internal/dev/model)
## over SIM_SEEDS seeds, each with a fault mix of its own: violations, the
## coverage of the interesting states, the slowest seed; a failing seed is
## kept in internal/dev/model/testdata/sim, which make test replays. make
## test runs 1,000 seeds (TestSimulator).
SIM_SEEDS ?= 50000
sim:
	$(GO) run ./cmd/cellpay-sim -seeds $(SIM_SEEDS) -keep internal/dev/model/testdata/sim

# Exploratory fuzzing: every fuzz target for FUZZTIME past its seed corpus,
# which make test replays. Not part of make test; CI runs it bounded.
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzRequest$$' -fuzztime $(FUZZTIME) ./internal/validate
	$(GO) test -run '^$$' -fuzz '^FuzzFollowUp$$' -fuzztime $(FUZZTIME) ./internal/validate
	$(GO) test -run '^$$' -fuzz '^FuzzPageToken$$' -fuzztime $(FUZZTIME) ./cmd/gtr/internal/payments
	$(GO) test -run '^$$' -fuzz '^FuzzValidateKey$$' -fuzztime $(FUZZTIME) ./pkg/idempotency
	$(GO) test -run '^$$' -fuzz '^FuzzMask$$' -fuzztime $(FUZZTIME) ./internal/card
	$(GO) test -run '^$$' -fuzz '^FuzzMaskIn$$' -fuzztime $(FUZZTIME) ./internal/card
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./internal/refdata
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeMessage$$' -fuzztime $(FUZZTIME) ./internal/refdata
	$(GO) test -run '^$$' -fuzz '^FuzzApply$$' -fuzztime $(FUZZTIME) ./internal/refdata
	$(GO) test -run '^$$' -fuzz '^FuzzAuthorize$$' -fuzztime $(FUZZTIME) ./internal/dev/issuersim
	$(GO) test -run '^$$' -fuzz '^FuzzListEffects$$' -fuzztime $(FUZZTIME) ./internal/dev/issuersim
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeEntry$$' -fuzztime $(FUZZTIME) ./internal/partnerstate
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./cmd/gtr/internal/config
	$(GO) test -run '^$$' -fuzz '^FuzzApplyTable$$' -fuzztime $(FUZZTIME) ./cmd/gtr/internal/admin
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeKeptDrill$$' -fuzztime $(FUZZTIME) ./cmd/gtr/internal/admin
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeDocument$$' -fuzztime $(FUZZTIME) ./internal/drillreport
	$(GO) test -run '^$$' -fuzz '^FuzzVerify$$' -fuzztime $(FUZZTIME) ./internal/drillreport
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeReport$$' -fuzztime $(FUZZTIME) ./cmd/gtr/internal/refwatch
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeRoutingEntry$$' -fuzztime $(FUZZTIME) ./cmd/gtr/internal/routesync
	$(GO) test -run '^$$' -fuzz '^FuzzLoadStateFile$$' -fuzztime $(FUZZTIME) ./cmd/gtr/internal/routesync
	$(GO) test -run '^$$' -fuzz '^FuzzProcessStreamOrder$$' -fuzztime $(FUZZTIME) ./cmd/cell/internal/server
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./cmd/cell/internal/directory
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeChain$$' -fuzztime $(FUZZTIME) ./cmd/cell/internal/directory
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./cmd/natsmon/internal/natsmon
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./internal/partners
	$(GO) test -run '^$$' -fuzz '^FuzzAuthenticate$$' -fuzztime $(FUZZTIME) ./internal/partners
	$(GO) test -run '^$$' -fuzz '^FuzzSteps$$' -fuzztime $(FUZZTIME) ./internal/pnr/gtrside
	$(GO) test -run '^$$' -fuzz '^FuzzVerify$$' -fuzztime $(FUZZTIME) ./pkg/webhook
	$(GO) test -run '^$$' -fuzz '^FuzzCallbackHandler$$' -fuzztime $(FUZZTIME) ./pkg/client
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./internal/cardkeys
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./internal/operators
	$(GO) test -run '^$$' -fuzz '^FuzzFromHeader$$' -fuzztime $(FUZZTIME) ./cmd/gtr/internal/auth
	$(GO) test -run '^$$' -fuzz '^FuzzHandler$$' -fuzztime $(FUZZTIME) ./cmd/gtr/internal/rest

## verify: formatting, vet, lint, tidy modules, fresh generated code.
verify: fmt-check vet lint tidy-check proto-check api-check k8s-verify norace-check

# The NORACE packages start no goroutine and share no memory (no go
# statement, no sync or sync/atomic import, no channel), so their tests
# run without the race detector; one that gains any goes back under it.
# (internal/dev/model/rapid_test.go holds a mutex only in case rapid calls its
# test recorder from another goroutine.)
norace-check:
	@bad=$$(grep -lE '(^|[^a-zA-Z_.])go (func|[a-zA-Z_.]+\()|"sync(/atomic)?"|chan ' $(addsuffix /*.go,$(NORACE)) | grep -v '^./internal/dev/model/rapid_test.go$$' || true); \
	if [ -n "$$bad" ]; then echo "norace-check: these files of NORACE packages start goroutines or share memory; take their package out of NORACE:"; echo "$$bad"; exit 1; fi

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
	@if [ -n "$$(git status --porcelain -- pkg proto api)" ]; then git status --porcelain -- pkg proto api; echo "generated code is stale: run make proto and commit"; exit 1; fi

## api-check: the API contract: buf lint (STANDARD, exceptions justified in
## proto/buf.yaml) and buf breaking (FILE) against the last released
## contract, proto/released/ (docs/partners/changelog.md).
api-check:
	./scripts/apicheck.sh

## k8s-test: render every overlay, decode strictly, check probes, limits, policies (deploy/k8s/check).
k8s-test:
	cd deploy/k8s/check && $(GO) test -count=1 ./...

## monitoring-test: alert rules checked and unit-tested by promtool; rules'
## and dashboards' metric names checked against the code (deploy/monitoring).
monitoring-test: promtool-test
	$(GO) test -count=1 ./deploy/monitoring

# The promtool half of monitoring-test (make test runs deploy/monitoring's
# Go tests with every other package).
promtool-test:
	@command -v $(PROMTOOL) >/dev/null || { echo "promtool-test: $(PROMTOOL) not found: make deps installs it"; exit 1; }
	$(PROMTOOL) check rules deploy/monitoring/rules/cellpay.rules.yaml
	cd deploy/monitoring/rules && $(PROMTOOL) test rules cellpay.rules_test.yaml

## monitoring-e2e: a real Prometheus with the project's rules over a platform
## started as make run does (an alert fires and resolves), and one trace
## across the GTR, a cell and the issuer (test/monitoring, which make test
## runs too; about 2 minutes).
monitoring-e2e:
	$(GO) test -race -count=1 -timeout 10m ./test/monitoring/...

## k8s-envtest: server-side dry run of every overlay against a real kube-apiserver and etcd (built once, cached).
k8s-envtest:
	./scripts/k8s-envtest.sh

k8s-verify:
	cd deploy/k8s/check && $(GO) vet ./... && $(GO) vet -tags envtest ./... && $(GO) mod tidy -diff \
		&& $(GO) tool -modfile=../../../tools/go.mod staticcheck ./... && $(GO) tool -modfile=../../../tools/go.mod staticcheck -tags envtest ./...

## Benchmarks. Every bench target runs through the harness (benchrun,
## internal/dev/benchrun): its variants interleaved, BENCH_RUNS runs each (at
## least 5), each on a quiet host, every figure as its median and spread.
## BENCHMARKS.md has the current figures and says how to read them.
BENCH_RUNS ?= 5
BENCHRUN    = $(BIN)/benchrun -runs $(BENCH_RUNS)
# e2ebench NAME TEST ENV: one platform benchmark of test/e2e as a benchrun
# variant (each run starts a platform of its own).
e2ebench = $(BENCHRUN) -v $(1)='$(3)=1 $(GO) test -count=1 -timeout 30m -run "^($(2))$$" -v ./test/e2e/'

$(BIN)/benchrun: FORCE
	$(GO) build -o $(BIN)/ ./cmd/benchrun

## bench: the Go benchmarks (routing hot path, orchestrator).
bench: $(BIN)/benchrun
	$(BENCHRUN) -v go='$(GO) test -run "^$$" -bench . -benchmem -count 1 ./pkg/routing/ ./internal/pnr/cellside/'

## bench-e2e: end-to-end against pgbench (throughput, CPU µs per transaction per process) and the GTR's added latency (minutes).
## FOLLOWUPS=SHARE (0..1, default 0) has the load tool follow that share of the pgbench comparison's approved authorizations with captures and refunds, or a void (scripts/bench-e2e.sh).
bench-e2e: build
	RUNS=$(BENCH_RUNS) ./scripts/bench-e2e.sh

## bench-directory: the transaction directory's claim, its cost per transaction.
bench-directory: $(BIN)/benchrun
	$(BENCHRUN) -v directory='./scripts/bench-directory.sh'

## bench-failover: kill -9 a cell under load; detection time, p99 and throughput around it.
bench-failover: $(BIN)/benchrun
	$(call e2ebench,failover,TestFailoverBenchmark,CELLPAY_FAILOVER_BENCH)

## bench-standby: a synchronous standby's cost (closed loop, sync vs async vs none) and the launcher's failover time after kill -9 of a primary.
bench-standby: $(BIN)/benchrun
	$(call e2ebench,standby,TestStandbyBenchmark,CELLPAY_STANDBY_BENCH)

## bench-sitecopy: a cell's asynchronous copy in the other site (20 ms each way): throughput, latency and its primary's CPU per transaction with the copy streaming and stopped.
bench-sitecopy: $(BIN)/benchrun
	$(call e2ebench,sitecopy,TestSiteCopyBenchmark,CELLPAY_SITECOPY_BENCH)

## bench-overload: saturation, then 2.5x it for 10 s, then 100 tx/s, with admission control as shipped, an alternative (CELLPAY_OVERLOAD_EXP) and none (CELLPAY_OVERLOAD_MODES=on,exp,off); and fairness between partners. About 15 minutes a run.
bench-overload: $(BIN)/benchrun
	$(call e2ebench,overload,TestOverloadBenchmark|TestFairnessBenchmark,CELLPAY_OVERLOAD_BENCH)

## bench-access-points: the client's failover between the access points, by strategy: loss to the backup's first answer, calls that waited for the retry.
bench-access-points: $(BIN)/benchrun
	$(call e2ebench,access_points,TestAccessPointBenchmark,CELLPAY_AP_BENCH)

## bench-hops: the cost of mutual TLS and the hops' policies on GTR→cell (in-process GTR, fake cell) and cell→issuer (issuer simulator), plaintext and mTLS side by side.
bench-hops: $(BIN)/benchrun
	$(BENCHRUN) -v hops='$(GO) test -run "^$$" -bench "^(BenchmarkSubmitOverMTLS|BenchmarkAuthorizeOverMTLS)$$" -benchmem -benchtime 3s -count 1 ./cmd/gtr/internal/payments/ ./internal/dev/issuersim/'

## bench-rest: the partners' REST/JSON path next to gRPC: the GTR's CPU µs per call, throughput, p50 and p99 (a platform per run).
bench-rest: $(BIN)/benchrun build
	$(call e2ebench,rest,TestRESTCostBenchmark,CELLPAY_REST_BENCH)

## bench-followups: a capture, a refund and a void next to the authorization they follow: CPU µs per call per process (GTR, the cell, its Postgres, NATS), throughput, p50 and p99 (a platform per run).
bench-followups: $(BIN)/benchrun build
	$(call e2ebench,followups,TestFollowUpCostBenchmark,CELLPAY_FOLLOWUP_BENCH)

## bench-trust: the cost of TLS and partner authentication at the GTR, side by side (in-process GTR, fake cell).
bench-trust: $(BIN)/benchrun
	$(BENCHRUN) -v trust='CELLPAY_TRUST_BENCH=1 $(GO) test -count=1 -timeout 10m -run "^TestTrustCostBenchmark$$" -v ./cmd/gtr/internal/payments/ && $(GO) test -run "^$$" -bench "^BenchmarkSubmitTrust$$" -benchmem -count 1 ./cmd/gtr/internal/payments/'

## bench-refdata: reference data lag at 100 updates/s and throughput while 10k snapshots apply.
bench-refdata: $(BIN)/benchrun
	$(call e2ebench,refdata,TestRefdataBenchmark,CELLPAY_REFDATA_BENCH)

## bench-callbacks: transactions with callbacks delivered and without, side by side, and delivery lag.
bench-callbacks: $(BIN)/benchrun
	$(call e2ebench,callbacks,TestCallbackBenchmark,CELLPAY_CALLBACK_BENCH)

## bench-retention: what the partitions of transactions and callbacks cost a payment's writes: the database's CPU µs per transaction just after migration 011, with 400 days in quarters (as shipped) and in months.
bench-retention: $(BIN)/benchrun
	$(BENCHRUN) -v fresh='$(call writebench,0,1)' -v quarters='$(call writebench,15,3)' -v months='$(call writebench,15,1)'

writebench = CELLPAY_WRITE_BENCH=3000 CELLPAY_WRITE_BENCH_MONTHS=$(1) CELLPAY_WRITE_BENCH_SPAN=$(2) $(GO) test -count=1 -run "^TestWriteCostBenchmark$$" -v ./cmd/cell/internal/store/

## soak: the fault tests (kill, Postgres stop, freeze, issuer) at a higher rate for longer.
soak:
	CELLPAY_SOAK_RATE=$${CELLPAY_SOAK_RATE:-150} CELLPAY_SOAK_SECONDS=$${CELLPAY_SOAK_SECONDS:-60} CELLPAY_SOAK_FOLLOWUPS=$${CELLPAY_SOAK_FOLLOWUPS:-0.3} \
	  $(GO) test -count=1 -timeout 60m -run '^TestFault' -v ./test/e2e/

clean:
	rm -rf $(BIN)

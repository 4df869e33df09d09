#!/usr/bin/env bash
# The platform benchmarks of BENCHMARKS.md §1 and §2, through the harness
# (benchrun: variants interleaved, RUNS runs each, medians and spread):
#
#  1. End-to-end through the GTR against pgbench running the cell's own
#     SQL (scripts/bench/cell-txn.sql) against the same Postgres, both
#     closed loop at 32 workers/clients: throughput, and CPU µs per
#     transaction of every process of the platform (from /proc; the load
#     tool and pgbench by their rusage).
#  2. The GTR's added latency: the load tool straight at cell-a against the
#     same load through the GTR (whose table sends everything to cell-a),
#     open loop at RATE tx/s, little enough that the two cores are not the
#     bottleneck.
#
# Traffic goes to loopback only; every run is bounded by count and time.
# Usage: scripts/bench-e2e.sh [seconds-per-run]   (default 15)
# Env: RUNS (default 5), RATE (default 100), BENCH_OUT (keep the harness's
# JSON there), FOLLOWUPS (default 0): the share (0..1) of §1's approved
# authorizations the load tool follows, within the run, by captures then
# refunds or a void (loadgen -followups; also in the warm-up). Opt-in: at
# 0 §1's load is as before, without follow-ups: pgbench's script
# (scripts/bench/cell-txn.sql) is an authorization's SQL, so #43's
# comparison stays like for like. Above 0, §1's tx and CPU µs per tx are
# still per submit, each carrying its share of follow-ups, and BENCH
# followups counts them. §2 never follows up (the cell target has no
# follow-ups, and its two variants must carry the same load).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-15}
runs=${RUNS:-5}
rate=${RATE:-100}
followups=${FOLLOWUPS:-0}
work=$(mktemp -d /tmp/cellpay-bench.XXXXXX)
chmod 755 "$work"
out=${BENCH_OUT:-$work}
mkdir -p "$out"
make -s build
cat >"$work/gtr.yaml" <<'YAML'
# Benchmark table: one pool holding cell-a only, so that the load tool's
# direct-to-cell runs and its through-the-GTR runs load the same cell.
version: 1
cells:
  - {id: cell-a, addr: "127.0.0.1:7081", pool: bench}
rules:
  - {name: bench, pool: bench}
YAML
data="$work/data"
./bin/cellpay -bin bin -data "$data" -config "$work/gtr.yaml" >"$data.log" 2>&1 &
plat=$!
trap 'kill -INT "$plat" 2>/dev/null; wait "$plat" 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 1 240); do grep -q "cellpay is running" "$data.log" && break; sleep 0.5; done
grep -q "cellpay is running" "$data.log" || {
	cat "$data.log"
	echo "bench-e2e: the platform did not start"
	exit 1
}
lg="./bin/loadgen -bench -ca $data/pki/ca.crt -keys $data/partners"
echo "== warm-up"
$lg -target gtr -mode closed -c 16 -n 3000 -d 30s -followups "$followups" >/dev/null

echo "== §1 through the GTR against pgbench, closed loop, 32 workers/clients, ${secs} s a run, follow-ups $followups"
./bin/benchrun -runs "$runs" -procs "$plat" -per tx -md -json "$out/e2e-pgbench.json" \
	-v gtr="$lg -target gtr -mode closed -c 32 -n 1000000 -d ${secs}s -followups $followups" \
	-v pgbench="scripts/bench/pgbench.sh $data 32 $secs"

echo "== §2 the GTR's added latency, open loop at $rate tx/s, ${secs} s a run"
./bin/benchrun -runs "$runs" -md -json "$out/e2e-latency.json" \
	-v cell="$lg -target cell -addr 127.0.0.1:7081 -mode open -rate $rate -c 64 -n $((rate * secs))" \
	-v gtr="$lg -target gtr -mode open -rate $rate -c 64 -n $((rate * secs))"

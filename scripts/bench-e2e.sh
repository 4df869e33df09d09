#!/usr/bin/env bash
# The platform benchmarks of BENCHMARKS.md, in one run on this machine:
#  1. GTR overhead: the load tool straight at cell-a against the same load
#     through the GTR (whose table sends everything to cell-a), open loop at
#     about half of saturation, runs interleaved.
#  2. End-to-end throughput at saturation (closed loop through the GTR)
#     against pgbench running the cell's own SQL (scripts/bench/cell-txn.sql)
#     against the same Postgres at the same concurrency.
# Traffic goes to loopback only; every run is bounded by count and time.
# Usage: scripts/bench-e2e.sh [seconds-per-run]   (default 15)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-15}
work=$(mktemp -d /tmp/cellpay-bench.XXXXXX)
chmod 755 "$work"
out="$work/results"
mkdir -p "$out"
make -s build
cat > "$work/gtr.yaml" <<'YAML'
# Benchmark table: one pool holding cell-a only, so that the load tool's
# direct-to-cell runs and its through-the-GTR runs load the same cell.
version: 1
cells:
  - {id: cell-a, addr: "127.0.0.1:7081", pool: bench}
rules:
  - {name: bench, pool: bench}
YAML
./bin/cellpay -bin bin -data "$work/data" -config "$work/gtr.yaml" >"$work/cellpay.log" 2>&1 &
plat=$!
trap 'kill -INT $plat 2>/dev/null; wait $plat 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 1 120); do grep -q "cellpay is running" "$work/cellpay.log" && break; sleep 0.5; done
grep -q "cellpay is running" "$work/cellpay.log" || { cat "$work/cellpay.log"; echo "platform did not start"; exit 1; }

# The GTR serves TLS and needs the partners' keys: those this platform made.
lg() { ./bin/loadgen -json -d "${secs}s" -ca "$work/data/pki/ca.crt" -keys "$work/data/partners" "$@"; }
field() { python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, r))" "$@"; }

echo "== warm-up"
lg -target gtr -mode closed -c 16 -n 3000 >/dev/null

echo "== saturation (closed loop, c=32)"
lg -target cell -addr 127.0.0.1:7081 -mode closed -c 32 -n 200000 > "$out/sat-cell.json"
# The through-the-GTR saturation run is also the CPU and WAL measurement:
# CPU seconds of every process from /proc before and after (the load tool
# by its rusage), and WAL syncs on cell-a's primary from pg_stat_wal.
snap() { python3 scripts/bench/proccpu.py snapshot "$plat" > "$1"; }
walsync() {
  PGPASSWORD=$(cat "$work/data/pgroles/cell-a/cellpay_app.password") PGSSLMODE=verify-full PGSSLROOTCERT="$work/data/pki/ca.crt" \
    psql -X -A -t -h 127.0.0.1 -p 7431 -U cellpay_app -d cellpay -c "SELECT wal_sync FROM pg_stat_wal"
}
snap "$out/cpu-before.json"; walsync > "$out/wal-before.txt"
python3 scripts/bench/proccpu.py run "$out/cpu-loadgen.json" -- \
  ./bin/loadgen -json -d "${secs}s" -ca "$work/data/pki/ca.crt" -keys "$work/data/partners" -target gtr -mode closed -c 32 -n 200000 > "$out/sat-gtr.json"
snap "$out/cpu-after.json"; walsync > "$out/wal-after.txt"
sat=$(field "$out/sat-gtr.json" "throughput")
rate=$(python3 -c "print(max(50, int($sat/2)))")
echo "   GTR saturation $sat tx/s; half: $rate tx/s"

echo "== GTR overhead at $rate tx/s (open loop), interleaved"
n=$((rate * secs))
for i in 1 2; do
  lg -target cell -addr 127.0.0.1:7081 -mode open -rate "$rate" -c 256 -n "$n" > "$out/half-cell-$i.json"
  lg -target gtr -mode open -rate "$rate" -c 256 -n "$n" > "$out/half-gtr-$i.json"
done

echo "== GTR overhead at 100 tx/s (open loop, little CPU contention), interleaved"
for i in 1 2; do
  lg -target cell -addr 127.0.0.1:7081 -mode open -rate 100 -c 64 -n $((100 * secs)) > "$out/low-cell-$i.json"
  lg -target gtr -mode open -rate 100 -c 64 -n $((100 * secs)) > "$out/low-gtr-$i.json"
done

echo "== pgbench: the cell's SQL against cell-a's Postgres, c=32"
snap "$out/pg-cpu-before.json"; walsync > "$out/pg-wal-before.txt"
# As the cell itself connects: its application role, over verified TLS.
PGPASSWORD=$(cat "$work/data/pgroles/cell-a/cellpay_app.password") PGSSLMODE=verify-full PGSSLROOTCERT="$work/data/pki/ca.crt" \
  pgbench -n -h 127.0.0.1 -p 7431 -U cellpay_app -c 32 -j 2 -T "$secs" -f scripts/bench/cell-txn.sql cellpay > "$out/pgbench.txt" 2>&1
snap "$out/pg-cpu-after.json"; walsync > "$out/pg-wal-after.txt"

sat_tx=$(field "$out/sat-gtr.json" "completed")
pg_tx=$(grep -oP 'number of transactions actually processed: \K[0-9]+' "$out/pgbench.txt" || echo 1)
echo
echo "CPU per transaction at saturation through the GTR ($sat_tx transactions):"
python3 scripts/bench/proccpu.py report "$out/cpu-before.json" "$out/cpu-after.json" "$sat_tx" "loadgen=$out/cpu-loadgen.json"
echo
echo "CPU per transaction, pgbench ($pg_tx transactions; pgbench itself not counted):"
python3 scripts/bench/proccpu.py report "$out/pg-cpu-before.json" "$out/pg-cpu-after.json" "$pg_tx" | grep -E "^\| (process|---|postgres|all)"
python3 -c "
b, a, pb, pa = (int(open(f).read().strip() or 0) for f in ('$out/wal-before.txt', '$out/wal-after.txt', '$out/pg-wal-before.txt', '$out/pg-wal-after.txt'))
print(f'WAL syncs per transaction on cell-a primary: through the GTR {(a - b) / $sat_tx:.2f}, pgbench {(pa - pb) / $pg_tx:.2f}')
"

python3 - "$out" <<'PY'
import json, sys, glob, re, os
out = sys.argv[1]
def load(n): return json.load(open(os.path.join(out, n)))
print()
print("| run | throughput tx/s | p50 ms | p90 ms | p99 ms | errors |")
print("|---|---|---|---|---|---|")
for n in ["sat-cell.json", "sat-gtr.json", "half-cell-1.json", "half-gtr-1.json", "half-cell-2.json", "half-gtr-2.json",
          "low-cell-1.json", "low-gtr-1.json", "low-cell-2.json", "low-gtr-2.json"]:
    r = load(n); l = r["latency_ms"]
    print(f"| {n[:-5]} | {r['throughput']:.0f} | {l['p50']:.2f} | {l['p90']:.2f} | {l['p99']:.2f} | {sum(r.get('errors',{}).values())} |")
for phase, label in (("half", "half of saturation"), ("low", "100 tx/s")):
    cell = [load(f"{phase}-cell-{i}.json")["latency_ms"] for i in (1, 2)]
    gtr = [load(f"{phase}-gtr-{i}.json")["latency_ms"] for i in (1, 2)]
    for q in ("p50", "p99"):
        d = sum(g[q] for g in gtr) / 2 - sum(c[q] for c in cell) / 2
        print(f"GTR adds at {q}, {label}: {d:+.2f} ms (mean of 2 interleaved pairs)")
pg = open(os.path.join(out, "pgbench.txt")).read()
m = re.search(r"tps = ([0-9.]+)", pg)
tps = float(m.group(1)) if m else float("nan")
sat = load("sat-gtr.json")["throughput"]
print(f"pgbench (cell SQL, c=32): {tps:.0f} tx/s; end-to-end through the GTR: {sat:.0f} tx/s; ratio {sat/tps:.2f}")
PY

#!/usr/bin/env bash
# The platform benchmarks of BENCHMARKS.md, in one run on this machine:
#  1. GTR overhead: the load tool straight at cell-a against the same load
#     through the GTR (whose table sends everything to cell-a), open loop at
#     about half of saturation, runs interleaved.
#  2. End-to-end throughput at saturation (closed loop through the GTR)
#     against pgbench running the cell's own SQL (scripts/bench/cell-txn.sql)
#     against the same Postgres: at the same concurrency (32), and each
#     swept to its best (the GTR at up to 512 workers, pgbench at up to 128
#     clients), best against best.
#  3. CPU µs per transaction of every process (from /proc; the load tool by
#     its rusage) and WAL syncs per transaction (pg_stat_wal), at
#     saturation through the GTR, first on a platform with the cells' group
#     commit off (CELL_GROUP_COMMIT=0), then on one with it on (the default),
#     which the rest of the runs use.
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
plat=
# start_platform DATA [ENV=VALUE...]: the platform on DATA, its children
# with the environment given.
start_platform() {
  local data=$1; shift
  env "$@" ./bin/cellpay -bin bin -data "$data" -config "$work/gtr.yaml" >"$data.log" 2>&1 &
  plat=$!
  for _ in $(seq 1 120); do grep -q "cellpay is running" "$data.log" && break; sleep 0.5; done
  grep -q "cellpay is running" "$data.log" || { cat "$data.log"; echo "platform did not start"; exit 1; }
}
stop_platform() { kill -INT "$plat" 2>/dev/null; wait "$plat" 2>/dev/null || true; plat=; }
trap 'stop_platform; rm -rf "$work"' EXIT

# The GTR serves TLS and needs the partners' keys: those this platform made.
data="$work/data"
lg() { ./bin/loadgen -json -d "${secs}s" -ca "$data/pki/ca.crt" -keys "$data/partners" "$@"; }
field() { python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, r))" "$@"; }
# snap: CPU seconds of every process of the platform, from /proc;
# walsync: WAL syncs so far on cell-a's primary (pg_stat_wal), as the cell
# connects (its application role, over verified TLS).
snap() { python3 scripts/bench/proccpu.py snapshot "$plat" > "$1"; }
walsync() {
  PGPASSWORD=$(cat "$data/pgroles/cell-a/cellpay_app.password") PGSSLMODE=verify-full PGSSLROOTCERT="$data/pki/ca.crt" \
    psql -X -A -t -h 127.0.0.1 -p 7431 -U cellpay_app -d cellpay -c "SELECT wal_sync FROM pg_stat_wal"
}
# measured NAME: the closed-loop saturation run through the GTR, with CPU
# seconds of every process before and after (the load tool by its rusage)
# and WAL syncs.
measured() {
  snap "$out/cpu-$1-before.json"; walsync > "$out/wal-$1-before.txt"
  python3 scripts/bench/proccpu.py run "$out/cpu-$1-loadgen.json" -- \
    ./bin/loadgen -json -d "${secs}s" -ca "$data/pki/ca.crt" -keys "$data/partners" -target gtr -mode closed -c 32 -n 200000 > "$out/sat-$1.json"
  snap "$out/cpu-$1-after.json"; walsync > "$out/wal-$1-after.txt"
}

echo "== before: group commit off, saturation through the GTR (closed loop, c=32)"
data="$work/data-off"
start_platform "$data" CELL_GROUP_COMMIT=0
lg -target gtr -mode closed -c 16 -n 3000 >/dev/null
measured nogc
stop_platform

data="$work/data"
start_platform "$data"
echo "== warm-up"
lg -target gtr -mode closed -c 16 -n 3000 >/dev/null

echo "== saturation (closed loop, c=32), group commit on"
lg -target cell -addr 127.0.0.1:7081 -mode closed -c 32 -n 200000 > "$out/sat-cell.json"
measured gtr
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

# Saturated against saturated: with group commit the cell serves more the
# more transactions are in flight, and Postgres's own flush grouping does
# the same for pgbench, so c=32 is a latency-bound point for both. Each
# side swept (closed loop through the GTR at 64 to 512 workers, pgbench at
# 64 and 128 clients), and the best of each compared.
echo "== saturation swept: pgbench at 64 and 128 clients, then through the GTR at 64..512 workers"
for c in 64 128; do
  PGPASSWORD=$(cat "$work/data/pgroles/cell-a/cellpay_app.password") PGSSLMODE=verify-full PGSSLROOTCERT="$work/data/pki/ca.crt" \
    pgbench -n -h 127.0.0.1 -p 7431 -U cellpay_app -c "$c" -j 2 -T "$secs" -f scripts/bench/cell-txn.sql cellpay > "$out/sweep-pgbench-$c.txt" 2>&1
done
# The GTR's sweep last: each of its phases leaves callbacks to deliver,
# which a pgbench run after it would share the host with.
for c in 64 128 256 512; do
  lg -target gtr -mode closed -c "$c" -n 200000 > "$out/sweep-gtr-$c.json"
done

pg_tx=$(grep -oP 'number of transactions actually processed: \K[0-9]+' "$out/pgbench.txt" || echo 1)
wal() { python3 -c "import sys; print(f'{(int(open(sys.argv[2]).read()) - int(open(sys.argv[1]).read())) / int(sys.argv[3]):.2f}')" "$@"; }
for m in nogc gtr; do
  tx=$(field "$out/sat-$m.json" "completed")
  label="group commit on"; [ "$m" = nogc ] && label="group commit off"
  echo
  echo "CPU per transaction at saturation through the GTR, $label ($tx transactions, $(field "$out/sat-$m.json" "round(throughput)") tx/s, WAL syncs per transaction $(wal "$out/wal-$m-before.txt" "$out/wal-$m-after.txt" "$tx")):"
  python3 scripts/bench/proccpu.py report "$out/cpu-$m-before.json" "$out/cpu-$m-after.json" "$tx" "loadgen=$out/cpu-$m-loadgen.json"
done
echo
echo "CPU per transaction, pgbench ($pg_tx transactions; pgbench itself not counted; WAL syncs per transaction $(wal "$out/pg-wal-before.txt" "$out/pg-wal-after.txt" "$pg_tx")):"
python3 scripts/bench/proccpu.py report "$out/pg-cpu-before.json" "$out/pg-cpu-after.json" "$pg_tx" | grep -E "^\| (process|---|postgres|all)"

python3 - "$out" <<'PY'
import json, sys, glob, re, os
out = sys.argv[1]
def load(n): return json.load(open(os.path.join(out, n)))
print()
print("| run | throughput tx/s | p50 ms | p90 ms | p99 ms | errors |")
print("|---|---|---|---|---|---|")
for n in ["sat-nogc.json", "sat-cell.json", "sat-gtr.json", "half-cell-1.json", "half-gtr-1.json", "half-cell-2.json", "half-gtr-2.json",
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
nogc = load("sat-nogc.json")["throughput"]
print(f"group commit: saturation through the GTR {sat:.0f} tx/s on, {nogc:.0f} tx/s off (a platform of its own, same machine, same run): ratio {sat/nogc:.2f}")
print(f"pgbench (cell SQL, c=32): {tps:.0f} tx/s; end-to-end through the GTR (c=32): {sat:.0f} tx/s; ratio {sat/tps:.2f}")
def pgtps(n):
    m = re.search(r"tps = ([0-9.]+)", open(os.path.join(out, n)).read())
    return float(m.group(1)) if m else float("nan")
gtr = {32: sat} | {c: load(f"sweep-gtr-{c}.json")["throughput"] for c in (64, 128, 256, 512)}
pgb = {32: tps} | {c: pgtps(f"sweep-pgbench-{c}.txt") for c in (64, 128)}
print("swept, tx/s: through the GTR " + ", ".join(f"{v:.0f} at {c}" for c, v in gtr.items()) +
      "; pgbench " + ", ".join(f"{v:.0f} at {c}" for c, v in pgb.items()))
gc, gv = max(gtr.items(), key=lambda kv: kv[1])
pc, pv = max(pgb.items(), key=lambda kv: kv[1])
print(f"saturated, best against best: end-to-end through the GTR {gv:.0f} tx/s ({gc} workers), pgbench {pv:.0f} tx/s ({pc} clients); ratio {gv/pv:.2f}")
PY

#!/usr/bin/env bash
# The transaction directory's cost end to end (docs/benchmarks/log/directory.md): the same
# load through the GTR with the cells claiming every transaction in the
# directory (as they run) and with CELL_NO_DIRECTORY=1, platforms started
# in turn (on, off, on, off), each run measured side by side: saturation
# (closed loop, c=32) and a fixed open-loop rate. It prints a table and its
# figures as BENCH lines, which benchrun reads (make bench-directory).
# Traffic goes to loopback only; every run is bounded by count and time.
# Usage: scripts/bench-directory.sh [seconds-per-run] [open-loop tx/s]   (defaults 10, 300)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
rate=${2:-300}
work=$(mktemp -d /tmp/cellpay-bench-dir.XXXXXX)
chmod 755 "$work"
out="$work/results"
mkdir -p "$out"
make -s build
plat=
stop() { if [ -n "$plat" ]; then kill -INT "$plat" 2>/dev/null; wait "$plat" 2>/dev/null || true; plat=; fi; }
trap 'stop; rm -rf "$work"' EXIT

lg() { ./bin/loadgen -json -d "${secs}s" -ca "$work/data/pki/ca.crt" -keys "$work/data/partners" "$@"; }

for round in 1 2; do
  for mode in on off; do
    env_args=()
    [ "$mode" = off ] && env_args=(CELL_NO_DIRECTORY=1)
    env "${env_args[@]}" ./bin/cellpay -bin bin -data "$work/data" >"$work/cellpay-$mode-$round.log" 2>&1 &
    plat=$!
    for _ in $(seq 1 120); do grep -q "cellpay is running" "$work/cellpay-$mode-$round.log" && break; sleep 0.5; done
    grep -q "cellpay is running" "$work/cellpay-$mode-$round.log" || { cat "$work/cellpay-$mode-$round.log"; echo "platform did not start"; exit 1; }
    echo "== directory $mode, round $round"
    lg -target gtr -mode closed -c 16 -n 2000 >/dev/null
    lg -target gtr -mode closed -c 32 -n 200000 > "$out/sat-$mode-$round.json"
    lg -target gtr -mode open -rate "$rate" -c 256 -n $((rate * secs)) > "$out/open-$mode-$round.json"
    stop
  done
done

python3 - "$out" "$rate" <<'PY'
import json, sys, os
out, rate = sys.argv[1], sys.argv[2]
def load(n): return json.load(open(os.path.join(out, n)))
print()
print("| run | throughput tx/s | p50 ms | p90 ms | p99 ms | errors |")
print("|---|---|---|---|---|---|")
for r in (1, 2):
    for kind in ("sat", "open"):
        for mode in ("on", "off"):
            d = load(f"{kind}-{mode}-{r}.json"); l = d["latency_ms"]
            name = f"{'saturation c=32' if kind == 'sat' else rate + ' tx/s open loop'}, directory {mode}, round {r}"
            print(f"| {name} | {d['throughput']:.0f} | {l['p50']:.2f} | {l['p90']:.2f} | {l['p99']:.2f} | {sum(d.get('errors',{}).values())} |")
# The same figures as BENCH lines, for benchrun (make bench-directory runs
# this script through it): "BENCH <name> <value> <unit>", the load
# (saturation, open_loop) and the directory (on, off) in each name, a
# sample per round (two a run).
print()
for r in (1, 2):
    for kind, label in (("sat", "saturation"), ("open", "open_loop")):
        for mode in ("on", "off"):
            d = load(f"{kind}-{mode}-{r}.json"); l = d["latency_ms"]
            print(f"BENCH throughput_{label}_{mode} {d['throughput']:.6g} tx/s")
            for q in ("p50", "p90", "p99"):
                print(f"BENCH {q}_{label}_{mode} {l[q]:.6g} ms")
            print(f"BENCH errors_{label}_{mode} {sum(d.get('errors',{}).values())} count")
on = sum(load(f"sat-on-{r}.json")["throughput"] for r in (1, 2)) / 2
off = sum(load(f"sat-off-{r}.json")["throughput"] for r in (1, 2)) / 2
print(f"saturation, directory on / off: {on:.0f} / {off:.0f} = {on/off:.2f}")
print(f"BENCH saturation_on_vs_off {on/off:.6g} ratio")
for q in ("p50", "p99"):
    a = sum(load(f"open-on-{r}.json")["latency_ms"][q] for r in (1, 2)) / 2
    b = sum(load(f"open-off-{r}.json")["latency_ms"][q] for r in (1, 2)) / 2
    print(f"{q} at {rate} tx/s, directory on - off: {a - b:+.2f} ms")
    print(f"BENCH {q}_open_loop_on_minus_off {a - b:.6g} ms")
PY

#!/usr/bin/env bash
# pgbench.sh DATA CLIENTS SECONDS: pgbench running a cell's own SQL
# (cell-txn.sql) against cell-a's Postgres primary of the platform in DATA,
# as the cell connects (its application role, over verified TLS), printing
# its figures as benchrun's BENCH lines: tx (transactions), throughput
# (tx/s) and the mean latency (ms).
set -euo pipefail
data=$1 clients=$2 secs=$3
here=$(dirname "$0")
out=$(PGPASSWORD=$(cat "$data/pgroles/cell-a/cellpay_app.password") PGSSLMODE=verify-full PGSSLROOTCERT="$data/pki/ca.crt" \
	pgbench -n -h 127.0.0.1 -p 7431 -U cellpay_app -c "$clients" -j 2 -T "$secs" -f "$here/cell-txn.sql" cellpay 2>&1) || {
	echo "$out" >&2
	exit 1
}
tx=$(echo "$out" | sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p')
tps=$(echo "$out" | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
lat=$(echo "$out" | sed -n 's/^latency average = \([0-9.]*\) ms.*/\1/p')
[ -n "$tx" ] && [ -n "$tps" ] || {
	echo "$out" >&2
	echo "pgbench.sh: no transaction count or tps in pgbench's output" >&2
	exit 1
}
echo "BENCH tx $tx"
echo "BENCH throughput $tps tx/s"
[ -n "$lat" ] && echo "BENCH latency_mean $lat ms"
exit 0

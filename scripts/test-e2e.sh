#!/usr/bin/env bash
# test-e2e.sh: the end-to-end package (test/e2e) as its shards, all at once,
# each a test process with a platform of its own (test/e2e/shards_test.go
# says which tests each runs and why they are shards), and beside them, as
# one more job, go test -race of the packages in E2E_BESIDE.
#
# Prints every test's result and time per shard, and the whole output of a
# job that failed, then each failed test's own lines and the summary again
# (a log cut in its middle still ends with them). Exit status: 0 when every
# job passed.
#
# Env: GO (default go), E2E_FLAGS (extra go test flags), E2E_SHARDS (default
# every shard), E2E_BESIDE (packages; default none), E2E_LOGS (keep the
# logs there; default a temporary directory, removed after a pass).
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
shards=${E2E_SHARDS:-main access faults}
logs=${E2E_LOGS:-$(mktemp -d /tmp/cellpay-e2e-logs.XXXXXX)}
mkdir -p "$logs"

# Build the test binary once, before the shards start, so that they start
# together and none of them times its first test against the compiler.
# shellcheck disable=SC2086
$GO test -c -o "$logs/e2e.test" ${E2E_FLAGS:-} ./test/e2e/ >"$logs/build.log" 2>&1 || {
	cat "$logs/build.log"
	echo "test-e2e: building the package failed"
	exit 1
}

# failedTests LOG prints, for each top-level test that failed in LOG (go
# test -v output), its last 60 lines from "=== RUN" to "--- FAIL".
failedTests() {
	awk '
		/^=== RUN   [^\/]+$/ { n = 0 }
		{ buf[n++ % 60] = $0 }
		/^--- FAIL: / {
			for (i = (n > 60 ? n - 60 : 0); i < n; i++) print buf[i % 60]
			n = 0
		}
	' "$1"
}

start=$SECONDS
declare -A pids
for s in $shards; do
	# As go test runs a test binary: in the package's directory.
	(cd test/e2e && CELLPAY_E2E_SHARD=$s exec "$logs/e2e.test" -test.count=1 -test.v -test.timeout 15m) >"$logs/$s.log" 2>&1 &
	pids[$s]=$!
done
jobs=$shards
if [ -n "${E2E_BESIDE:-}" ]; then
	# shellcheck disable=SC2086
	$GO test -count=1 -race -p 3 -v -timeout 15m ${E2E_FLAGS:-} $E2E_BESIDE >"$logs/beside.log" 2>&1 &
	pids[beside]=$!
	jobs="$jobs beside"
fi
failed=()
for s in $jobs; do
	if wait "${pids[$s]}"; then
		echo "test-e2e: $s passed"
	else
		failed+=("$s")
		echo "test-e2e: $s FAILED"
	fi
	grep -E '^(--- (PASS|FAIL): Test|ok |FAIL)' "$logs/$s.log" | sed "s/^/  [$s] /"
done
summary="test-e2e: ${#failed[@]} of $(echo $jobs | wc -w) jobs failed, in $((SECONDS - start)) s"
echo "$summary"
if [ ${#failed[@]} -gt 0 ]; then
	for s in "${failed[@]}"; do
		echo "===== $s: whole output ($logs/$s.log) ====="
		cat "$logs/$s.log"
	done
	# Last, where a log cut short in its middle still shows them: each
	# failed test's own lines, from its RUN to its FAIL (the last 60).
	for s in "${failed[@]}"; do
		echo "===== $s: the failed tests ====="
		failedTests "$logs/$s.log"
	done
	echo "$summary"
	exit 1
fi
[ -z "${E2E_LOGS:-}" ] && rm -rf "$logs"
exit 0

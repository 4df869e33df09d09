#!/usr/bin/env bash
# deps.sh: install what `make run` and `make test` need beyond Go and make,
# and say what and why. It is the one install step: `make run`, `make test`
# and .ci/run call it, so a fresh Debian machine needs only the README's two
# commands.
#
#   scripts/deps.sh run    what `make run` needs
#   scripts/deps.sh test   what `make test` needs (a superset)
#
# What each package is for:
#   postgresql   server binaries (/usr/lib/postgresql/*/bin): every cell's
#                private Postgres, in make run and in the store and e2e tests
# (nats-server is not among them: make build builds the module's own into
# bin/, the version of the Kubernetes manifests' image.)
#   prometheus   promtool, for the alert rules' checks and unit tests, and the
#                server itself for test/monitoring (an alert fires and resolves)
#   chromium     headless browser for the GTR operator console's test
#                (cmd/gtr/internal/console, driven by chromedp)
#   curl         the partner guide's curl lines, run as printed
#                (test/e2e/guide_test.go)
#   nftables     nft, which cuts the link between two sites on this host
#                (test/e2e/sites_partition_test.go: rules on their loopback
#                addresses)
#   nodejs, npm  the partners' TypeScript client (clients/typescript) and its
#                test against a platform (test/e2e/tsclient_test.go); its
#                packages (npm ci, the pinned TypeScript compiler) are
#                installed too, into npm's cache and clients/typescript
#
# Something already installed is left alone; a missing package is installed
# with apt-get when we are root, otherwise the script fails naming the
# command to run. It never passes silently with something missing.
set -euo pipefail

what=${1:-test}
case $what in run | test) ;; *)
	echo "usage: $0 run|test" >&2
	exit 2
	;;
esac

say() { echo "deps: $*" >&2; }
die() {
	echo "deps: FAIL: $*" >&2
	exit 1
}

have_postgres() { ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; }
have_prometheus() { command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; }
have_chromium() { command -v chromium >/dev/null 2>&1; }
have_curl() { command -v curl >/dev/null 2>&1; }
have_node() { command -v node >/dev/null 2>&1; }
have_nft() { command -v nft >/dev/null 2>&1; }
have_npm() { command -v npm >/dev/null 2>&1; }
have_barman() { command -v barman-cloud-backup >/dev/null 2>&1 && command -v barman-cloud-wal-restore >/dev/null 2>&1 && python3 -c "import boto3" >/dev/null 2>&1; }

# npm_ci installs the TypeScript client's locked packages, once per
# package-lock.json (they fill npm's cache, from which its test's npm ci
# works offline).
npm_ci() {
	[ "$what" = test ] || return 0
	local dir
	dir="$(cd "$(dirname "$0")/.." && pwd)/clients/typescript"
	if [ -e "$dir/node_modules/.package-lock.json" ] && [ ! "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; then
		return 0
	fi
	say "npm ci in clients/typescript (the TypeScript client's packages)"
	(cd "$dir" && npm ci --no-audit --no-fund) >>/tmp/cellpay-deps.log 2>&1 ||
		die "npm ci in clients/typescript failed (log: /tmp/cellpay-deps.log)"
}

need=()
why=()
have_postgres || {
	need+=(postgresql)
	why+=("postgresql (each cell's private Postgres)")
}
if [ "$what" = test ]; then
	have_prometheus || {
		need+=(prometheus)
		why+=("prometheus (promtool for the alert rules' tests; the server for test/monitoring)")
	}
	have_chromium || {
		need+=(chromium)
		why+=("chromium (the operator console's browser test)")
	}
	have_curl || {
		need+=(curl)
		why+=("curl (the partner guide's curl lines)")
	}
	have_nft || {
		need+=(nftables)
		why+=("nftables (the cut between two sites in the partition test)")
	}
	have_node || {
		need+=(nodejs)
		why+=("nodejs (the TypeScript client's build and tests)")
	}
	have_npm || {
		need+=(npm)
		why+=("npm (the TypeScript client's packages)")
	}
	have_barman || {
		need+=(barman-cli-cloud python3-boto3)
		why+=("barman-cli-cloud and python3-boto3 (the backup test: CloudNativePG's Barman Cloud tools, and the S3 client they use, against a local object store)")
	}
fi
if [ ${#need[@]} -eq 0 ]; then
	npm_ci
	exit 0
fi

say "make $what needs, and this machine lacks: $(printf '%s; ' "${why[@]}")"
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
	die "install them as root: apt-get install --no-install-recommends ${need[*]}"
fi
say "installing with apt-get: ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
# A fresh machine's package lists may be empty or stale: update once, then
# retry the install, rather than update on every run.
if ! apt-get install -y -q --no-install-recommends "${need[@]}" >/tmp/cellpay-deps.log 2>&1; then
	apt-get update -q >>/tmp/cellpay-deps.log 2>&1 || die "apt-get update failed (log: /tmp/cellpay-deps.log)"
	apt-get install -y -q --no-install-recommends "${need[@]}" >>/tmp/cellpay-deps.log 2>&1 ||
		die "apt-get install ${need[*]} failed (log: /tmp/cellpay-deps.log)"
fi

have_postgres || die "postgresql: no /usr/lib/postgresql/*/bin/initdb after the install"
if [ "$what" = test ]; then
	have_prometheus || die "prometheus: promtool or prometheus not on PATH after the install"
	have_chromium || die "chromium: not on PATH after the install"
	have_curl || die "curl: not on PATH after the install"
	have_node || die "nodejs: node not on PATH after the install"
	have_npm || die "npm: not on PATH after the install"
	have_barman || die "barman-cli-cloud: barman-cloud-backup not on PATH, or python3 without boto3, after the install"
fi
say "installed: ${need[*]}"
npm_ci

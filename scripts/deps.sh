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
fi
[ ${#need[@]} -eq 0 ] && exit 0

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
fi
say "installed: ${need[*]}"

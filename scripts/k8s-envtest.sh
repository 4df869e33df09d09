#!/usr/bin/env bash
# k8s-envtest.sh: a server-side dry run of every deploy/k8s overlay against a
# real kube-apiserver backed by a real etcd (envtest style, no cluster, no
# Docker).
#
#   kube-apiserver  built from the k8s.io/kubernetes Go module (version
#                   K8S_VERSION, from the Go module proxy) in a throwaway
#                   module, once, then cached under CACHE_DIR.
#   etcd            Debian's etcd-server package (apt-get install etcd-server,
#                   done here when missing and we are root).
#
# Then it runs the envtest-tagged test in deploy/k8s/check, which starts both,
# renders every overlay and applies each object with dryRun=All.
#
# It fails loudly, never passes silently: any step that cannot be done ends
# the script non-zero with the reason.
#
# Env: CELLPAY_K8S_CACHE (default ~/.cache/cellpay-k8s), K8S_VERSION (default
# below), ETCD (path of an etcd binary to use instead of Debian's).
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.37.2}
# The staging modules (k8s.io/api, k8s.io/apiserver, ...) are published as
# v0.MINOR.PATCH for a v1.MINOR.PATCH release.
STAGING_VERSION=v0.${K8S_VERSION#v1.}
CACHE_DIR=${CELLPAY_K8S_CACHE:-$HOME/.cache/cellpay-k8s}
ROOT=$(cd "$(dirname "$0")/.." && pwd)

die() { echo "k8s-envtest: FAIL: $*" >&2; exit 1; }
say() { echo "k8s-envtest: $*" >&2; }

command -v go >/dev/null || die "go is not on PATH"

# --- kube-apiserver -----------------------------------------------------------
APISERVER=$CACHE_DIR/$K8S_VERSION/kube-apiserver
build_apiserver() {
	local work mod
	work=$(mktemp -d)
	trap 'rm -rf "$work"' RETURN
	say "building kube-apiserver $K8S_VERSION (first time only; cached in $CACHE_DIR)"
	local start=$SECONDS
	# k8s.io/kubernetes is not meant to be a dependency: its go.mod requires
	# every staging module at v0.0.0 and replaces it with ./staging/src/...,
	# and replace directives of a dependency are ignored. So the throwaway
	# module repeats those replaces, pointing each at its published version.
	local info
	info=$(cd "$work" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" 2>&1) ||
		die "go mod download k8s.io/kubernetes@$K8S_VERSION failed (module resolution via the Go proxy): $info"
	mod=$(echo "$info" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
	[ -f "$mod" ] || die "go mod download k8s.io/kubernetes@$K8S_VERSION gave no go.mod: $info"
	local staging
	staging=$(sed -n 's#^[[:space:]]*\(k8s\.io/[a-z0-9-]*\) => \./staging/src/.*#\1#p' "$mod")
	[ -n "$staging" ] || die "no staging replace directives found in $mod: the module layout changed"
	{
		echo "module cellpay.local/kube-apiserver-build"
		echo
		echo "go $(sed -n 's/^go \(.*\)/\1/p' "$mod")"
		echo
		echo "require k8s.io/kubernetes $K8S_VERSION"
		echo
		echo "replace ("
		for m in $staging; do echo "	$m => $m $STAGING_VERSION"; done
		echo ")"
	} >"$work/go.mod"
	printf '//go:build tools\n\npackage tools\n\nimport _ "k8s.io/kubernetes/cmd/kube-apiserver"\n' >"$work/tools.go"
	(cd "$work" && go mod tidy >"$work/tidy.log" 2>&1) || { cat "$work/tidy.log" >&2; die "go mod tidy of the throwaway kube-apiserver module failed (module resolution)"; }
	mkdir -p "$(dirname "$APISERVER")"
	# Stamp the version as the Kubernetes build does (hack/lib/version.sh),
	# else the server reports v0.0.0-master.
	local minor=${K8S_VERSION#v1.}
	minor=${minor%%.*}
	local v=k8s.io/component-base/version
	local ldflags="-s -X $v.gitVersion=$K8S_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
	ldflags="$ldflags -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"
	# Without optimisations or inlining (-N -l): the server only answers a
	# dry run of a few hundred objects, and on a fresh machine this build is
	# the largest step of CI. On 2 cores: 417 s so, alone on the host; 566 s
	# optimised, beside other work (docs/benchmarks/log/test-suite.md). It
	# starts in 6.8 s rather than 5.2.
	(cd "$work" && CGO_ENABLED=0 go build -trimpath -gcflags="all=-N -l" -ldflags="$ldflags" -o "$APISERVER.tmp" k8s.io/kubernetes/cmd/kube-apiserver) ||
		die "go build k8s.io/kubernetes/cmd/kube-apiserver@$K8S_VERSION failed"
	mv "$APISERVER.tmp" "$APISERVER"
	say "built $APISERVER in $((SECONDS - start))s"
}
if [ ! -x "$APISERVER" ]; then build_apiserver; fi
"$APISERVER" --version >/dev/null 2>&1 || die "$APISERVER does not run"

# --- etcd ---------------------------------------------------------------------
ETCD=${ETCD:-}
if [ -z "$ETCD" ]; then
	if ! command -v etcd >/dev/null; then
		if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
			say "installing Debian's etcd-server"
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null ||
				{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null; } ||
				die "apt-get install etcd-server failed"
		else
			die "etcd not found: apt-get install etcd-server (needs root) or set ETCD=/path/to/etcd"
		fi
	fi
	ETCD=$(command -v etcd)
fi
"$ETCD" --version >/dev/null 2>&1 || die "$ETCD does not run"

say "kube-apiserver: $("$APISERVER" --version)"
say "etcd: $("$ETCD" --version | head -1)"

# --- the dry run --------------------------------------------------------------
# The dry run is behind the envtest build tag and CELLPAY_ENVTEST=1, so a
# plain `go test ./...` in deploy/k8s/check never starts servers. -count=1:
# never a cached pass.
cd "$ROOT/deploy/k8s/check"
CELLPAY_ENVTEST=1 CELLPAY_KUBE_APISERVER=$APISERVER CELLPAY_ETCD=$ETCD \
	go test -tags envtest -count=1 -timeout 10m -run '^TestServerDryRun' -v ./... ||
	die "server-side dry run failed"

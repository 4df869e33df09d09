#!/usr/bin/env bash
# Checks the API contract, the .proto files under proto/ (`make api-check`,
# part of `make verify`):
#   1. buf lint: the STANDARD rules, less the exceptions proto/buf.yaml
#      lists, each with its reason;
#   2. buf breaking: the FILE rules, against the last released contract,
#      proto/released/<version>.binpb (the newest by version; see
#      proto/released/README.md and docs/partners/changelog.md).
# buf is the one protogen.sh uses: pinned in tools/buf/go.mod and built into
# the same directory, so nothing comes from the machine or the network.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${CELLPAY_TOOLS_BIN:-$(go env GOCACHE)/cellpay-tools}"
mkdir -p "$bin"
(cd tools/buf && go build -o "$bin/" github.com/bufbuild/buf/cmd/buf)
buf="$bin/buf"

# The last released contract: the highest vX.Y.Z.binpb.
against=$( (ls -d proto/released/v*.binpb 2>/dev/null || true) | sort -V | tail -n 1)
if [ -z "$against" ]; then
	echo "api-check: no released contract (proto/released/v*.binpb); see proto/released/README.md" >&2
	exit 1
fi

status=0
if "$buf" lint proto; then
	echo "api-check: buf lint: clean (STANDARD, exceptions in proto/buf.yaml)"
else
	cat >&2 <<'EOF'
api-check: buf lint failed (the lines above). Fix the .proto files, without
  renaming or renumbering anything released; where a rule cannot be met
  without a breaking change, add a per-file exception under lint.ignore_only
  in proto/buf.yaml with a comment saying why (no buf:lint:ignore comments).
EOF
	status=1
fi

if "$buf" breaking proto --against "$against"; then
	echo "api-check: buf breaking: compatible with $against (FILE rules)"
else
	cat >&2 <<EOF
api-check: buf breaking failed: the change above breaks the last released
  contract, $against (FILE rules), which partners and the
  other side of every internal hop still use. Make it compatible instead:
  add a new field, value, method or message and mark the old one
  deprecated (the FILE rules allow no deletion or rename, reserved or not).
  A change that must break belongs in a new package version (cellpay.v2)
  beside v1. See docs/partners/changelog.md.
EOF
	status=1
fi
exit "$status"

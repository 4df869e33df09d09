#!/usr/bin/env bash
# k8s-new-cell.sh NAME: add a cell to deploy/k8s. Writes overlays/NAME (the
# cell's namespace, certificate and the issuance policy that lets its
# namespace obtain that identity alone, and via base/cell its Deployment,
# Postgres Cluster, Service and NetworkPolicies), adds its one line to the
# GTR's routing table (overlays/platform/gtr.yaml, at weight 0, version
# raised), makes its Postgres roles' passwords, adds it to NATS's users, and runs the checks over
# the result.
#
# Then: review and commit, apply the overlay and the platform overlay, and
# ramp the cell in with gtrctl (deploy/k8s/README.md, "Add a cell").
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 NAME   (e.g. cell-d)" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT/deploy/k8s/check"
go run ./cmd/newcell -root .. "$1"
"$ROOT/scripts/k8s-secrets.sh"
# The new cell is a NATS user (deploy/k8s/base/nats/auth.conf).
(cd "$ROOT" && go test -count=1 -run TestKubernetesAuthConf ./internal/natsauth -update)
go test -count=1 ./...

#!/usr/bin/env bash
# Regenerates the Go code for every .proto under proto/ with pinned
# generators and nothing from the machine: buf (its compiler carries the
# well-known types, so no protoc and no /usr/include/google/protobuf) pinned
# in tools/buf/go.mod, and the Go plugins pinned in tools/go.mod. buf lives in
# a module of its own so that its dependencies cannot move the plugins'
# versions. The output is committed; `make verify` re-runs this and fails
# when the tree changes.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${CELLPAY_TOOLS_BIN:-$(go env GOCACHE)/cellpay-tools}"
mkdir -p "$bin"
(cd tools && go build -o "$bin/" google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/grpc/cmd/protoc-gen-go-grpc)
(cd tools/buf && go build -o "$bin/" github.com/bufbuild/buf/cmd/buf)
template=$(cat <<JSON
{"version":"v2","plugins":[
 {"local":"$bin/protoc-gen-go","out":".","opt":["module=github.com/cellpay/cellpay"]},
 {"local":"$bin/protoc-gen-go-grpc","out":".","opt":["module=github.com/cellpay/cellpay"]}
]}
JSON
)
"$bin/buf" generate proto --template "$template"

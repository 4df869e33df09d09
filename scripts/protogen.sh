#!/usr/bin/env bash
# Regenerates the code for every .proto under proto/ with pinned
# generators and nothing from the machine: buf (its compiler carries the
# well-known types, so no protoc and no /usr/include/google/protobuf) pinned
# in tools/buf/go.mod, and the plugins pinned in tools/go.mod. buf lives in
# a module of its own so that its dependencies cannot move the plugins'
# versions. Every package gets its Go messages and gRPC stubs; the partners'
# API (cellpay.v1) also gets its REST/JSON gateway and its OpenAPI document
# (api/openapi/), both from the HTTP rules in
# proto/cellpay/v1/payments_http.yaml. The output is committed; `make
# verify` re-runs this and fails when the tree changes.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${CELLPAY_TOOLS_BIN:-$(go env GOCACHE)/cellpay-tools}"
mkdir -p "$bin"
(cd tools && go build -o "$bin/" google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/grpc/cmd/protoc-gen-go-grpc \
	github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2)
(cd tools/buf && go build -o "$bin/" github.com/bufbuild/buf/cmd/buf)
mod=github.com/cellpay/cellpay
template=$(cat <<JSON
{"version":"v2","plugins":[
 {"local":"$bin/protoc-gen-go","out":".","opt":["module=$mod"]},
 {"local":"$bin/protoc-gen-go-grpc","out":".","opt":["module=$mod"]}
]}
JSON
)
"$bin/buf" generate proto --template "$template"
http=proto/cellpay/v1/payments_http.yaml
template=$(cat <<JSON
{"version":"v2","plugins":[
 {"local":"$bin/protoc-gen-grpc-gateway","out":".","opt":["module=$mod","grpc_api_configuration=$http","standalone=false"]},
 {"local":"$bin/protoc-gen-openapiv2","out":"api/openapi","opt":["grpc_api_configuration=$http","allow_merge=true","merge_file_name=cellpay.v1.json","disable_default_errors=false","json_names_for_fields=false","enums_as_ints=false","openapi_configuration=proto/cellpay/v1/payments_openapi.yaml"]}
]}
JSON
)
"$bin/buf" generate proto --template "$template" --path proto/cellpay/v1

#!/usr/bin/env bash
# Regenerates the Go code for every .proto under proto/ with pinned
# generators: protoc from Debian bookworm (3.21.12, checked below) and the Go
# plugins pinned in tools/go.mod. The output is committed; `make verify`
# re-runs this and fails when the tree changes.
set -euo pipefail
cd "$(dirname "$0")/.."
want="libprotoc 3.21.12"
have="$(protoc --version 2>/dev/null || true)"
if [ "$have" != "$want" ]; then
  echo "protogen: need '$want' (Debian package protobuf-compiler), have '${have:-none}'" >&2
  exit 1
fi
bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT
(cd tools && go build -o "$bin/" google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/grpc/cmd/protoc-gen-go-grpc)
mapfile -t files < <(cd proto && find . -name '*.proto' | sed 's|^\./||' | sort)
protoc -I proto -I /usr/include \
  --plugin=protoc-gen-go="$bin/protoc-gen-go" --plugin=protoc-gen-go-grpc="$bin/protoc-gen-go-grpc" \
  --go_out=. --go_opt=module=github.com/cellpay/cellpay \
  --go-grpc_out=. --go-grpc_opt=module=github.com/cellpay/cellpay \
  "${files[@]}"

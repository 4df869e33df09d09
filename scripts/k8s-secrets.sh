#!/usr/bin/env bash
# k8s-secrets.sh: make the secret material deploy/k8s renders into Secrets,
# where it is missing. Never overwrites a file: a Postgres password or PAN key
# that changed under a running cell would lock it out of its data.
#
#   deploy/k8s/base/cell/secrets/pan-key                       PAN hashing key (32 bytes, hex), shared by all cells
#   deploy/k8s/overlays/CELL/secrets/cellpay-owner-password    per cell: Postgres role cellpay_owner (migrations)
#   deploy/k8s/overlays/CELL/secrets/cellpay-app-password      per cell: Postgres role cellpay_app (the cell)
#   deploy/k8s/overlays/platform/secrets/operators/            the GTR admin API's operators: ROLE.token for
#                                                              viewer, operator, admin (for gtrctl) and
#                                                              operators.yaml (their hashes, for the GTR),
#                                                              made by `gtrctl operators init`
#   deploy/k8s/overlays/platform/secrets/partners.yaml         the GTR partner registry, empty
#                                                              (partners are added with gtrctl)
#
# Passwords are hex: they go into the cell's database URLs as they are, so
# they must be URL-safe.
#
# The files are git-ignored. Keep them in your secret store; see
# deploy/k8s/README.md, "Secrets".
set -euo pipefail
K8S=$(cd "$(dirname "$0")/../deploy/k8s" && pwd)
umask 077

rand_hex() { od -An -vtx1 -N"$1" /dev/urandom | tr -d ' \n'; }

make_secret() {
	local file=$1 bytes=$2
	if [ -s "$file" ]; then
		return
	fi
	mkdir -p "$(dirname "$file")"
	rand_hex "$bytes" >"$file"
	echo "k8s-secrets: made ${file#"$K8S"/}"
}

# make_file FILE CONTENT: write CONTENT to FILE unless FILE exists.
make_file() {
	local file=$1 content=$2
	if [ -e "$file" ]; then
		return
	fi
	mkdir -p "$(dirname "$file")"
	printf '%s' "$content" >"$file"
	echo "k8s-secrets: made ${file#"$K8S"/}"
}

make_secret "$K8S/base/cell/secrets/pan-key" 32
# The operators: a token per role and the file of their hashes, written
# by the one tool that knows the format (it keeps a complete set and
# refuses a partial one, never overwriting a token).
(cd "$K8S/../.." && go run ./cmd/gtrctl operators init "$K8S/overlays/platform/secrets/operators") |
	sed 's/^/k8s-secrets: /'
# An empty partner registry: no partner may call until one is added. It only
# seeds an empty NATS KV bucket; partners are added through the admin API
# (gtrctl partners add), not in this file.
make_file "$K8S/overlays/platform/secrets/partners.yaml" $'version: 1\npartners: []\n'
for dir in "$K8S"/overlays/*/; do
	dir=${dir%/}
	name=$(basename "$dir")
	[ "$name" = platform ] && continue
	make_secret "$dir/secrets/cellpay-owner-password" 24
	make_secret "$dir/secrets/cellpay-app-password" 24
done

#!/usr/bin/env bash
# k8s-secrets.sh: make the secret material deploy/k8s renders into Secrets,
# where it is missing. Never overwrites a file: a Postgres password or PAN key
# that changed under a running cell would lock it out of its data.
#
#   deploy/k8s/base/cell/secrets/pan-key                  PAN hashing key (32 bytes, hex), shared by all cells
#   deploy/k8s/overlays/CELL/secrets/postgres-password    one per cell
#   deploy/k8s/overlays/platform/secrets/admin-token      the GTR admin API token
#   deploy/k8s/overlays/platform/secrets/partners.yaml    the GTR partner registry, empty
#                                                         (partners are added with gtrctl)
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
make_secret "$K8S/overlays/platform/secrets/admin-token" 32
# An empty partner registry: no partner may call until one is added. It only
# seeds an empty NATS KV bucket; partners are added through the admin API
# (gtrctl partners add), not in this file.
make_file "$K8S/overlays/platform/secrets/partners.yaml" $'version: 1\npartners: []\n'
for dir in "$K8S"/overlays/*/; do
	dir=${dir%/}
	name=$(basename "$dir")
	[ "$name" = platform ] && continue
	make_secret "$dir/secrets/postgres-password" 24
done

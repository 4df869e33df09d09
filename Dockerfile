# Cellpay images: one per binary, each a static Go binary on an empty (scratch)
# root with CA certificates and a non-root user. No shell, no package manager.
#
#   docker build --target cell -t ghcr.io/cellpay/cell:v0.1.0 .
#
# Targets: gtr, cell, issuersim, replicator, gtrctl, natsmon. The build image is pinned
# by exact tag (GO_IMAGE; pin it by digest in your registry mirror with
# --build-arg GO_IMAGE=golang@sha256:...); the run images start FROM scratch,
# which has nothing to pin. deploy/k8s/check tests these rules.

ARG GO_IMAGE=golang:1.26.8-bookworm

FROM ${GO_IMAGE} AS build
# What -version prints (internal/buildinfo): .git is not in the context
# (.dockerignore), so the build passes them, e.g.
# --build-arg CELLPAY_VERSION=v0.1.0 --build-arg CELLPAY_REVISION=$(git rev-parse HEAD).
ARG CELLPAY_VERSION=""
ARG CELLPAY_REVISION=""
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-trimpath
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/root/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/root/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -ldflags="-s -w -X github.com/cellpay/cellpay/internal/buildinfo.Version=${CELLPAY_VERSION} -X github.com/cellpay/cellpay/internal/buildinfo.Revision=${CELLPAY_REVISION}" -o /out/ ./cmd/gtr ./cmd/cell ./cmd/issuersim ./cmd/replicator ./cmd/gtrctl ./cmd/natsmon
# The run images' root: CA certificates, a passwd entry for uid 65532
# (nonroot), and /tmp.
RUN mkdir -p /rootfs/etc/ssl/certs /rootfs/tmp && chmod 1777 /rootfs/tmp \
 && cp /etc/ssl/certs/ca-certificates.crt /rootfs/etc/ssl/certs/ \
 && echo 'nonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin' >/rootfs/etc/passwd \
 && echo 'nonroot:x:65532:' >/rootfs/etc/group

FROM scratch AS runtime
COPY --from=build /rootfs/ /
USER 65532:65532

FROM runtime AS gtr
COPY --from=build /out/gtr /gtr
EXPOSE 7070 7071
ENTRYPOINT ["/gtr"]

FROM runtime AS cell
COPY --from=build /out/cell /cell
# The seed reference data (CELL_REFDATA_FILE); newer versions come over NATS.
COPY config/refdata.json /etc/cellpay/refdata.json
EXPOSE 7081
ENTRYPOINT ["/cell"]

FROM runtime AS issuersim
COPY --from=build /out/issuersim /issuersim
EXPOSE 7090
ENTRYPOINT ["/issuersim"]

FROM runtime AS replicator
COPY --from=build /out/replicator /replicator
# The reference data source the replicator watches (replicator watch -source).
COPY config/refdata /etc/cellpay/refdata
ENTRYPOINT ["/replicator"]

FROM runtime AS gtrctl
COPY --from=build /out/gtrctl /gtrctl
ENTRYPOINT ["/gtrctl"]

# The NATS pods' sidecar: NATS's monitoring endpoints as Prometheus metrics.
FROM runtime AS natsmon
COPY --from=build /out/natsmon /natsmon
EXPOSE 7777
ENTRYPOINT ["/natsmon"]

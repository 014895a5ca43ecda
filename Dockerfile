# syntax=docker/dockerfile:1
#
# infergate container image.
#   docker build -t infergate:dev --build-arg VERSION=$(git describe --tags --always --dirty) .
#   docker run --rm infergate:dev version --client
#
# The binary links libzmq through cgo (KV-exact event feeds), so the build
# stage needs libzmq3-dev and a C toolchain, and the runtime image needs the
# shared library libzmq5 from the same Debian release (one DEBIAN_RELEASE
# for both stages keeps glibc and libzmq in step).

ARG GO_VERSION=1.26
ARG DEBIAN_RELEASE=bookworm

FROM golang:${GO_VERSION}-${DEBIAN_RELEASE} AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends libzmq3-dev pkg-config \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Modules first: this layer is reused until go.mod/go.sum change.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
RUN CGO_ENABLED=1 go build -trimpath \
      -ldflags "-s -w -X github.com/infergate/infergate/buildinfo.version=${VERSION} -X github.com/infergate/infergate/buildinfo.commit=${COMMIT}" \
      -o /out/infergate ./cmd/infergate \
 && /out/infergate version --client

FROM debian:${DEBIAN_RELEASE}-slim
# Only what the binary links (libzmq5) and what HTTPS to engines, etcd and
# the management API needs (ca-certificates).
RUN apt-get update \
 && apt-get install -y --no-install-recommends libzmq5 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 65532 infergate \
 && useradd --system --uid 65532 --gid 65532 --home-dir /var/lib/infergate --no-create-home \
      --shell /usr/sbin/nologin infergate \
 && install -d -o 65532 -g 65532 -m 0700 /var/lib/infergate \
 && install -d -m 0755 /etc/infergate
COPY --from=build /out/infergate /usr/local/bin/infergate
COPY LICENSE /usr/share/doc/infergate/LICENSE
USER 65532:65532
WORKDIR /var/lib/infergate
VOLUME ["/var/lib/infergate"]
# 11111: management API. VIP ports are whatever the rules say.
EXPOSE 11111
# The binary is the entrypoint and `serve` the default command, so the same
# image also runs the CLI: `docker run IMAGE version`, `… get lb --server …`.
# By default the API listens on the container's loopback only (reach it with
# `docker exec`); to expose it give a token file, e.g.
#   serve --api-addr=0.0.0.0:11111 --api-token-file=/etc/infergate/api-tokens
ENTRYPOINT ["/usr/local/bin/infergate"]
CMD ["serve", "--state-dir=/var/lib/infergate"]

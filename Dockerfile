# syntax=docker/dockerfile:1
# trellis-proxy image: `make docker`, or
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) -t trellis-proxy .
# Run against an existing server:
#   docker run -p 6432:6432 trellis-proxy --upstream postgres://app@db:5432/app
# With no --upstream it runs the embedded default: a private PostgreSQL cluster
# kept in the /var/lib/trellis volume.

# ---- build: Debian, like the runtime, so cgo links against the same glibc.
FROM golang:1.26-bookworm AS build
WORKDIR /src
# Modules first: a source change then does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
# cgo because pg_query (grammar, router) is C; its first compile is slow, hence
# the build cache mount.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=1 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" \
      -o /out/trellis-proxy ./cmd/trellis-proxy

# ---- runtime: glibc (not scratch or static: cgo), non-root.
FROM debian:bookworm-slim
# The PostgreSQL server binaries serve the embedded default only. Debian's
# package would create and start a "main" cluster of its own; turn that off
# before installing it. ca-certificates: upstream TLS (sslmode=verify-full).
RUN set -eux; \
    apt-get update; \
    apt-get install -y --no-install-recommends postgresql-common ca-certificates; \
    sed -ri 's/^#?\s*(create_main_cluster)\s*=.*$/\1 = false/' /etc/postgresql-common/createcluster.conf; \
    apt-get install -y --no-install-recommends postgresql-15; \
    rm -rf /var/lib/apt/lists/*; \
    useradd --system --uid 10001 --user-group --home-dir /var/lib/trellis --create-home --shell /usr/sbin/nologin trellis
COPY --from=build /out/trellis-proxy /usr/local/bin/trellis-proxy

# Flags through their TRELLIS_* variables, so `docker run IMAGE --upstream ...`
# adds flags without having to repeat these. Inside a container the listeners
# must not be on loopback.
ENV TRELLIS_LISTEN=0.0.0.0:6432 \
    TRELLIS_HTTP_LISTEN=0.0.0.0:9090 \
    TRELLIS_DATA_DIR=/var/lib/trellis/pgdata
USER trellis
WORKDIR /var/lib/trellis
VOLUME /var/lib/trellis
# 6432: the PostgreSQL protocol; 9090: /metrics, /livez, /readyz.
EXPOSE 6432 9090
# SIGTERM starts the graceful shutdown (idle sessions get 57P01, busy ones a
# drain of --shutdown-grace, 30s by default): give `docker stop -t` more than that.
STOPSIGNAL SIGTERM
# No curl in the image: bash's /dev/tcp sends the request and the status line
# must say 200.
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
  CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/9090 && printf 'GET /readyz HTTP/1.0\\r\\nHost: localhost\\r\\n\\r\\n' >&3 && head -n1 <&3 | grep -q ' 200 '"]
ENTRYPOINT ["/usr/local/bin/trellis-proxy"]

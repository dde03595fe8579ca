# syntax=docker/dockerfile:1
# edgeplane: a static binary on a distroless base, running as a non-root user, data in /data.
#   docker build -t edgeplane --build-arg VERSION=$(git describe --always) .
#   docker run -p 8080:8080 -p 4443:4443 -p 8081:8081 -p 8443:8443 -v edgeplane-data:/data edgeplane
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
# CGO off: the SQLite driver is pure Go, so the binary needs no libc and runs on a static base.
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/edgeplane ./cmd/edgeplane \
 && mkdir -p /out/data && chown 65532:65532 /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/edgeplane /usr/local/bin/edgeplane
COPY --from=build --chown=65532:65532 /out/data /data
VOLUME /data
WORKDIR /data
# Every listener on all interfaces: the API (8080), agents (4443), public HTTP (8081) and TLS
# (8443), and TCP endpoints, each on its reserved address's port (--tcp-port-range, 10000-29999
# by default: publish the ones you hand out). The link between replicas is off unless
# EDGEPLANE_PEER_LISTEN is set (deploy/replicas/compose.yaml: 0.0.0.0:7443, with
# EDGEPLANE_PEER_ADVERTISE naming the address the other replicas dial).
ENV EDGEPLANE_LISTEN=0.0.0.0:8080 \
    EDGEPLANE_AGENT_LISTEN=0.0.0.0:4443 \
    EDGEPLANE_HTTP_LISTEN=0.0.0.0:8081 \
    EDGEPLANE_HTTPS_LISTEN=0.0.0.0:8443 \
    EDGEPLANE_TCP_LISTEN_HOST=0.0.0.0 \
    EDGEPLANE_DB=/data/edgeplane.db
EXPOSE 8080 4443 8081 8443 7443
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/edgeplane"]
CMD ["serve"]

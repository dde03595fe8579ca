# syntax=docker/dockerfile:1
# edgeplane: a static binary on a distroless base, running as a non-root user, data in /data.
#   docker build -t edgeplane --build-arg VERSION=$(git describe --always) .
#   docker run -p 8080:8080 -v edgeplane-data:/data edgeplane
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
ENV EDGEPLANE_LISTEN=0.0.0.0:8080 \
    EDGEPLANE_DB=/data/edgeplane.db
EXPOSE 8080
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/edgeplane"]
CMD ["serve"]

# Convenience targets; each is one command the README also names.
.PHONY: build test vet bench bench-traffic

build:
	CGO_ENABLED=0 go build -o edgeplane ./cmd/edgeplane

test:
	go test -count=1 ./...

vet:
	go vet ./...
	gofmt -l .

# The load benchmark (issue 7): baseline, SQLite, and PostgreSQL when EDGEPLANE_TEST_POSTGRES is
# set. Prints the table and writes it to bench/results.md. Takes several minutes.
bench:
	go run ./cmd/edgeplane-bench -out bench/results.md

# The data-plane benchmark (issue 22): direct, a one-hop ReverseProxy, and edgeplane's HTTPS edge and
# https endpoint through an ngrok-go agent, plus bulk transfers. Prints the table and writes it to
# bench/traffic.md. Takes about three minutes; BENCH_TRAFFIC_FLAGS adds flags (e.g. -bulk 256MiB).
bench-traffic:
	go run ./cmd/edgeplane-bench traffic -out bench/traffic.md $(BENCH_TRAFFIC_FLAGS)

# Convenience targets; each is one command the README also names.
.PHONY: build test vet bench bench-traffic bench-scale bench-replicas

build:
	CGO_ENABLED=0 go build -o edgeplane ./cmd/edgeplane

test:
	go test -count=1 -timeout 60m ./...

vet:
	go vet ./...
	gofmt -l .

# The API benchmark: baseline, SQLite, and PostgreSQL when EDGEPLANE_TEST_POSTGRES is
# set. Prints the table and writes it to bench/results.md. Takes several minutes.
bench:
	go run ./cmd/edgeplane-bench -out bench/results.md

# The data-plane benchmark: direct, a one-hop ReverseProxy, and edgeplane's HTTPS edge,
# https and http endpoints, TCP edge and an HTTPS edge with three modules through an ngrok-go agent,
# new TCP connections per second, plus bulk transfers. Prints the table and writes it to
# bench/traffic.md. Takes about five minutes; BENCH_TRAFFIC_FLAGS adds flags (e.g. -bulk 256MiB).
# frp 0.70.1 is measured beside them when bench/frp/bin holds its frps and frpc (git-ignored,
# never built here; docs/performance.md), and skipped with a note otherwise.
bench-traffic:
	go run ./cmd/edgeplane-bench traffic -out bench/traffic.md $(BENCH_TRAFFIC_FLAGS)

# The scale scenarios: 10,000 idle agent sessions (RSS, CPU at rest, the next bind), and
# an account with 100,000 routes across 10,000 edges (rate against a 1-edge account, change to
# traffic). Prints the tables and writes them to bench/scale.md. Takes about fifteen minutes and holds
# ~20,000 sockets; BENCH_SCALE_FLAGS adds flags (e.g. -sessions 2000 -edges 1000, -profile DIR).
bench-scale:
	go run ./cmd/edgeplane-bench scale -out bench/scale.md $(BENCH_SCALE_FLAGS)

# Traffic forwarded between replicas: two replicas on the PostgreSQL of EDGEPLANE_TEST_POSTGRES,
# an agent on one, requests, bulk transfers and open streams at its replica and at the other.
# Writes bench/replicas.md; about three minutes; BENCH_REPLICAS_FLAGS adds flags (-profile DIR).
bench-replicas:
	go run ./cmd/edgeplane-bench replicas -out bench/replicas.md $(BENCH_REPLICAS_FLAGS)

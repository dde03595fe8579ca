# Convenience targets; each is one command the README also names.
.PHONY: build test vet bench

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

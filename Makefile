# Convenience targets; each is one command the README also names.
.PHONY: build test vet

build:
	CGO_ENABLED=0 go build -o edgeplane ./cmd/edgeplane

test:
	go test -count=1 ./...

vet:
	go vet ./...
	gofmt -l .

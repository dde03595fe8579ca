// Package edgeplane is the domain of the edgeplane server: the wire types of the Edge Ingress
// Management API with their JSON tags, their Validate methods, the resource table that declares
// every collection, and the one Error type every layer returns.
//
// The package performs no I/O. The store (package store) persists the documents declared here and
// the HTTP layer (package server) serves them; both are driven by the table in table.go, so adding
// a collection is a table entry plus its types, never a new handler or query.
package edgeplane

package store

import (
	"context"
	"sync/atomic"
)

// importProgressKey is the context key of the row counter WithImportProgress installs.
type importProgressKey struct{}

// WithImportProgress returns a context under which Import adds one to rows for every row it
// restores, so that a caller can report progress from another goroutine while a long restore
// runs. The count covers rows written inside the restore's transaction: when Import fails, none
// of them is kept.
func WithImportProgress(ctx context.Context, rows *atomic.Int64) context.Context {
	return context.WithValue(ctx, importProgressKey{}, rows)
}

// importProgress returns the counter WithImportProgress installed in ctx, or nil.
func importProgress(ctx context.Context) *atomic.Int64 {
	rows, _ := ctx.Value(importProgressKey{}).(*atomic.Int64)
	return rows
}

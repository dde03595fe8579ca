package main

import (
	"context"
	"flag"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/edgeplane/edgeplane/internal/serving"
	"github.com/edgeplane/edgeplane/server"
	"github.com/edgeplane/edgeplane/store"
)

// referenceServer serves the API the way `edgeplane serve` does (the same store and server
// packages, HTTP timeouts, request log and garbage collector setting), with store options the command line does not offer:
// the durability rows compare group commit with one transaction per create on the same harness.
// With -cpuprofile it also writes a CPU profile of its whole life, for perf work.
func referenceServer(args []string) error {
	fs := flag.NewFlagSet("reference-server", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
	dsn := fs.String("db", "", "database DSN")
	durability := fs.String("durability", "normal", "normal or full")
	maxBatch := fs.Int("max-batch", 0, "most write transactions committed together (1: group commit off; 0: default)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	d, err := store.ParseDurability(*durability)
	if err != nil {
		return err
	}
	st, err := store.OpenWith(ctx, *dsn, store.Options{Durability: d, MaxBatch: *maxBatch})
	if err != nil {
		return err
	}
	defer st.Close()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	serving.SetGC(0)
	logOut := serving.NewLogWriter(os.Stderr)
	defer logOut.Close()
	log, err := serving.NewLogger(logOut, "text", slog.LevelInfo)
	if err != nil {
		return err
	}
	srv := &http.Server{
		// Metrics on the main listener, as edgeplane serve has them by default.
		Handler: server.New(st, server.Config{BaseURL: "http://" + ln.Addr().String(), Logger: log,
			Metrics: server.NewMetrics(st), MetricsOnMain: true, CORSOrigins: []string{"*"}}),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	cs := st.CommitStats()
	log.Info("group commit", "write_transactions", cs.Requests, "batches", cs.Batches)
	return err
}

package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/meshnode/health"
)

// runServer is the server child: the package's public API, nothing more,
// with every latch set so that both endpoints should answer 200. It prints
// its address, serves until its standard input closes, then reports how
// long Serve took to return and its own peak RSS and goroutines.
func runServer(args []string) error {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	nofile := fs.Uint64("nofile", 0, "set RLIMIT_NOFILE, soft and hard, to this (0: leave it)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *nofile > 0 {
		if err := setNofile(*nofile); err != nil {
			return err
		}
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv := health.NewServer(health.Config{Listen: "127.0.0.1:0"}, logger)
	srv.SetRegistered()
	srv.SetDataPlaneReady()
	ln, err := srv.Listen()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()

	var peak atomic.Int64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			if n := int64(runtime.NumGoroutine()); n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()

	fmt.Printf("addr %s\n", ln.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin) // the parent closes it to stop us
	start := time.Now()
	cancel()
	serveErr := <-served
	shutdown := time.Since(start)
	<-sampled
	if serveErr != nil {
		return serveErr
	}
	fmt.Printf("result goroutines=%d rss_kib=%d shutdown_ms=%.1f\n", peak.Load(), peakRSSKiB(), float64(shutdown.Microseconds())/1000)
	return nil
}

// peakRSSKiB is the process's high-water resident set, VmHWM.
func peakRSSKiB() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			var kib int64
			_, _ = fmt.Sscan(rest, &kib)
			return kib
		}
	}
	return -1
}

package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"time"

	"github.com/meshnode/health"
)

// The servers the server child can run (-server).
const (
	serverHealth = "health" // the package's Listen and Serve
	serverPlain  = "plain"  // a plain http.Server with the package's Handler
	// serverBoth is not a child's: each load runs against health, then
	// plain.
	serverBoth = "both"
)

// serverTitle says in the table's title which server ran.
func serverTitle(s string) string {
	switch s {
	case serverPlain:
		return "plain http.Server{Handler: Handler()}, 2 s timeouts, 4 KiB header cap, keep-alive off"
	case serverBoth:
		return "each load against health Listen + Serve, then against " + serverTitle(serverPlain)
	}
	return "health Listen + Serve"
}

// The lines the parent writes to the server child's standard input. Closing
// it stops the server.
const (
	markStart    = "start"    // probing starts: sample the CPU time used so far
	markEnd      = "end"      // probing ends: sample it again
	markSnapshot = "snapshot" // print a snapshot line at once
	markRelease  = "release"  // return free memory to the system, then print a snapshot
)

// runServer is the server child: the package's public API, nothing more,
// with every latch set so that both endpoints should answer 200 (or, with
// -server plain, a plain http.Server serving the package's Handler). It
// prints its address, then answers the parent's lines on standard input
// (markStart, markEnd, markSnapshot) until it closes, then reports how long
// the server took to return, its own peak RSS, live heap and goroutines,
// and the CPU it used between the marks.
func runServer(args []string) error {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	nofile := fs.Uint64("nofile", 0, "set RLIMIT_NOFILE, soft and hard, to this (0: leave it)")
	serverKind := fs.String("server", serverHealth, "health (Listen + Serve) or plain (an http.Server with Handler)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *serverKind != serverHealth && *serverKind != serverPlain {
		return fmt.Errorf("-server %q: want %s or %s", *serverKind, serverHealth, serverPlain)
	}
	if *nofile > 0 {
		if err := setNofile(*nofile); err != nil {
			return err
		}
	}
	var logLines atomic.Int64
	logger := slog.New(countingHandler{Handler: slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}), n: &logLines})
	srv := health.NewServer(health.Config{Listen: "127.0.0.1:0"}, logger)
	srv.SetRegistered()
	srv.SetDataPlaneReady()
	// The plain server listens as http.ListenAndServe does, without the
	// deferred accept that Listen sets.
	listen := srv.Listen
	if *serverKind == serverPlain {
		listen = func() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }
	}
	ln, err := listen()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	if *serverKind == serverPlain {
		go func() { served <- servePlain(ctx, srv.Handler(), ln, &logLines) }()
	} else {
		go func() { served <- srv.Serve(ctx, ln) }()
	}

	var peak, peakHeap atomic.Int64
	peakHeap.Store(-1) // until a sample: stays so where the metric is unsupported
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		heap := newLiveHeap()
		for {
			if n := int64(runtime.NumGoroutine()); n > peak.Load() {
				peak.Store(n)
			}
			if n := heap.bytes(); n > peakHeap.Load() {
				peakHeap.Store(n)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()

	fmt.Printf("addr %s\n", ln.Addr())
	var start, end cpuSample
	var evictedStart, evictedEnd uint64
	in := bufio.NewScanner(os.Stdin) // the parent closes it to stop us
	for in.Scan() {
		switch in.Text() {
		case markStart:
			start, err = sampleCPU()
			evictedStart = srv.Status().Conns.Evicted
		case markEnd:
			end, err = sampleCPU()
			evictedEnd = srv.Status().Conns.Evicted
		case markSnapshot:
			fmt.Println(takeSnapshot(srv))
		case markRelease:
			debug.FreeOSMemory()
			fmt.Println(takeSnapshot(srv))
		}
		if err != nil {
			cancel()
			return err
		}
	}
	stopping := time.Now()
	cancel()
	serveErr := <-served
	shutdown := time.Since(stopping)
	<-sampled
	if serveErr != nil {
		return serveErr
	}
	evictions := -1.0 // the plain server does not count them
	if *serverKind == serverHealth && !start.wall.IsZero() && end.wall.After(start.wall) {
		evictions = float64(evictedEnd-evictedStart) / end.wall.Sub(start.wall).Seconds()
	}
	heapKiB := peakHeap.Load() // -1 when not measured
	if heapKiB > 0 {
		heapKiB >>= 10
	}
	fmt.Println(serverResult{goroutines: peak.Load(), rssKiB: peakRSSKiB(), heapKiB: heapKiB, logLines: logLines.Load(), shutdownMs: float64(shutdown.Microseconds()) / 1000, cores: coresBusy(start, end), evictions: evictions})
	return nil
}

// servePlain serves h on ln with a plain http.Server and the package's
// timeouts and header cap, keep-alive off, until ctx is done; then it shuts
// down within 5 s, as Serve does, and closes what is still open. Its error
// log is counted in logLines but not written: at a low descriptor limit
// net/http logs every accept retry, which would bury the table.
func servePlain(ctx context.Context, h http.Handler, ln net.Listener, logLines *atomic.Int64) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 2 * time.Second,
		ReadTimeout:       2 * time.Second,
		WriteTimeout:      2 * time.Second,
		IdleTimeout:       2 * time.Second,
		MaxHeaderBytes:    4096,
		ErrorLog:          slog.NewLogLogger(countingHandler{Handler: slog.DiscardHandler, n: logLines}, slog.LevelError),
	}
	srv.SetKeepAlivesEnabled(false)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		_ = srv.Close()
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// countingHandler counts the lines of WARN and above logged through it,
// whether or not its Handler writes them (plain's is a discard): a flood
// that makes the server log on and on is a cost of its own, which the
// rows report and health's bars bound.
type countingHandler struct {
	slog.Handler
	n *atomic.Int64
}

func (h countingHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return level >= slog.LevelWarn || h.Handler.Enabled(ctx, level)
}

func (h countingHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		h.n.Add(1)
	}
	if !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h countingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return countingHandler{Handler: h.Handler.WithAttrs(attrs), n: h.n}
}

func (h countingHandler) WithGroup(name string) slog.Handler {
	return countingHandler{Handler: h.Handler.WithGroup(name), n: h.n}
}

// liveHeap samples the live heap without costing the server what it
// measures. It reads runtime/metrics' /gc/heap/live:bytes, the heap the
// last collection marked live, rather than MemStats.HeapAlloc: a
// metrics.Read of it does not stop the world, where ReadMemStats does,
// every 5 ms, and it needs no runtime.GC() to leave out the garbage
// awaiting collection, whose peak would be the GC's goal, not what the
// server holds. Under a load collections run often, so its peak is what
// the connections held at once.
type liveHeap struct{ s []metrics.Sample }

func newLiveHeap() liveHeap {
	return liveHeap{s: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
}

// bytes is the live heap now; -1 where the runtime has no such metric.
func (h liveHeap) bytes() int64 {
	metrics.Read(h.s)
	if h.s[0].Value.Kind() != metrics.KindUint64 {
		return -1
	}
	return int64(h.s[0].Value.Uint64())
}

// serverResult is the server child's result line.
type serverResult struct {
	goroutines int64   // peak
	rssKiB     int64   // peak, VmHWM
	heapKiB    int64   // peak live heap (see liveHeap); negative when not measured
	logLines   int64   // lines of WARN and above over the whole run (see countingHandler)
	shutdownMs float64 // from the cancel to the server's return
	cores      float64 // CPU busy between the marks, in cores; negative when not measured
	// evictions is how many connections a second Serve closed to make
	// room between the marks (Status().Conns.Evicted), silent ones all;
	// negative when not measured.
	evictions float64
}

func (r serverResult) String() string {
	return fmt.Sprintf("result goroutines=%d rss_kib=%d heap_kib=%d log_lines=%d shutdown_ms=%.1f cpu_cores=%.3f evictions_per_s=%.1f", r.goroutines, r.rssKiB, r.heapKiB, r.logLines, r.shutdownMs, r.cores, r.evictions)
}

// parseServerResult reads a result line, without its "result " prefix.
func parseServerResult(s string) (serverResult, error) {
	var r serverResult
	if _, err := fmt.Sscanf(s, "goroutines=%d rss_kib=%d heap_kib=%d log_lines=%d shutdown_ms=%f cpu_cores=%f evictions_per_s=%f", &r.goroutines, &r.rssKiB, &r.heapKiB, &r.logLines, &r.shutdownMs, &r.cores, &r.evictions); err != nil {
		return r, fmt.Errorf("server result %q: %w", s, err)
	}
	return r, nil
}

// snapshot is the server's state at one moment: its current resident set,
// its live heap, goroutines, open descriptors, and the connections Serve
// holds (0 for the plain server, which does not say).
type snapshot struct {
	rssKiB     int64 // VmRSS
	anonKiB    int64 // RssAnon: of VmRSS, the memory the process allocated, rather than its binary's pages
	heapKiB    int64 // live heap objects, after a collection
	goroutines int64
	fds        int64 // entries of /proc/self/fd, less the one reading it
	held       int64 // Status().Conns.Held
}

func takeSnapshot(srv *health.Server) snapshot {
	runtime.GC() // so that the heap figure is what is live, not what awaits collection
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return snapshot{
		rssKiB:     procStatusKiB("VmRSS:"),
		anonKiB:    procStatusKiB("RssAnon:"),
		heapKiB:    int64(ms.HeapAlloc >> 10),
		goroutines: int64(runtime.NumGoroutine()),
		fds:        openFDs(),
		held:       int64(srv.Status().Conns.Held),
	}
}

func (s snapshot) String() string {
	return fmt.Sprintf("snapshot rss_kib=%d anon_kib=%d heap_kib=%d goroutines=%d fds=%d held=%d", s.rssKiB, s.anonKiB, s.heapKiB, s.goroutines, s.fds, s.held)
}

// parseSnapshot reads a snapshot line, without its "snapshot " prefix.
func parseSnapshot(s string) (snapshot, error) {
	var r snapshot
	if _, err := fmt.Sscanf(s, "rss_kib=%d anon_kib=%d heap_kib=%d goroutines=%d fds=%d held=%d", &r.rssKiB, &r.anonKiB, &r.heapKiB, &r.goroutines, &r.fds, &r.held); err != nil {
		return r, fmt.Errorf("server snapshot %q: %w", s, err)
	}
	return r, nil
}

// peakRSSKiB is the process's high-water resident set, VmHWM.
func peakRSSKiB() int64 { return procStatusKiB("VmHWM:") }

// procStatusKiB reads one of /proc/self/status's figures in KiB; -1 when it
// cannot.
func procStatusKiB(key string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), key); ok {
			var kib int64
			_, _ = fmt.Sscan(rest, &kib)
			return kib
		}
	}
	return -1
}

// openFDs counts the process's open descriptors, not counting the one that
// lists them; -1 when it cannot.
func openFDs() int64 {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return int64(len(entries)) - 1
}

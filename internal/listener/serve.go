package listener

import (
	"context"
	"fmt"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// The bounds of what a connection may hold. Each is far above what a probe
// needs (one small request, sent at once, one small answer).
const (
	// headerTimeout bounds a request header's arrival, from accept: the
	// kubelet sends its request at once and gives up after its own
	// timeout (1 s by default), so longer only helps a slowloris client.
	// It is net/http's ReadHeaderTimeout too, and ReadTimeout: Serve reads
	// no body.
	headerTimeout = 2 * time.Second
	// writeTimeout bounds the answer, a few hundred bytes, against a
	// client that does not read; idleTimeout backs up keep-alive's being
	// off.
	writeTimeout = 2 * time.Second
	idleTimeout  = 2 * time.Second
	// maxHeaderBytes is net/http's MaxHeaderBytes. net/http reads up to
	// 4 KiB more before it gives up; the connection stops it earlier, at
	// maxRequestBytes, which says why.
	maxHeaderBytes = 4 << 10
	// shutdownBound is how long Serve waits, once ctx is done, for
	// requests in flight before it closes every connection.
	shutdownBound = 5 * time.Second
)

// LogFunc writes a log line as slog.Logger.Log does. Serve calls it from
// the goroutines that accept connections, so it must not wait for a sink.
type LogFunc func(level slog.Level, msg string, args ...any)

// Response is a fixed answer of the root's handler, as the short path
// writes it.
type Response struct {
	Status int
	// Header holds the handler's header lines, each ending in CRLF, in
	// the order net/http writes them: sorted by name.
	Header []byte
	Body   []byte
}

// AnswerFunc routes a plain probe (method GET or HEAD, path exactly
// /healthz or /readyz) as the root's handler does, and returns the
// counter that handler would count it in. It must not block, allocate or
// keep rawQuery, which is the short path's buffer.
type AnswerFunc func(method, path string, rawQuery []byte) (*Response, *atomic.Uint64)

// Counters are what Serve counts, for the root's Status. They are the
// caller's, so that several Serve calls add up.
type Counters struct {
	Held     atomic.Int64  // connections in net/http's slots now
	Limit    atomic.Int64  // the bound on Held, summed over running Serve calls
	Accepted atomic.Uint64 // connections accepted
	Evicted  atomic.Uint64 // of those, closed to make room
	// LastEviction is when the last eviction was, as MonotonicNow reads
	// it; 0 before the first.
	LastEviction atomic.Int64
}

// countEviction counts a connection closed to make room.
func (c *Counters) countEviction() {
	c.Evicted.Add(1)
	c.LastEviction.Store(MonotonicNow())
}

// monotonicBase anchors MonotonicNow.
var monotonicBase = time.Now()

// MonotonicNow is the time since the package was loaded on the monotonic
// clock, never 0: a step of the wall clock moves none of the times kept
// with it.
func MonotonicNow() int64 { return int64(time.Since(monotonicBase)) + 1 }

// Options are what Serve needs from its caller.
type Options struct {
	Handler  http.Handler // what net/http serves
	Answer   AnswerFunc   // plain probes answered at accept; nil answers none there
	Counters *Counters
	Log      LogFunc
	// Limit is the bound on net/http's slots: DefaultLimit, or a
	// test's smaller one.
	Limit int

	// room is the waiting room's size for a test: 0 for roomSize's, -1
	// for none, as outside Linux.
	room int
}

// DefaultLimit is the bound on net/http's slots for this process: see
// connLimit.
func DefaultLimit() int { return connLimit(softDescriptorLimit()) }

// Listen binds addr over TCP with accept deferred from the first
// connection on (see setDeferAccept).
func Listen(addr string) (net.Listener, error) {
	lc := net.ListenConfig{
		// A probe's connection lives for one request and a few seconds
		// at most: keep-alive would only cost system calls at accept.
		KeepAlive: -1,
		Control:   func(_, _ string, rc syscall.RawConn) error { return setDeferAccept(rc) },
	}
	return lc.Listen(context.Background(), "tcp", addr)
}

// IsAddressInUse reports whether a bind failed because the port is taken.
func IsAddressInUse(err error) bool { return isAddressInUse(err) }

// Serve serves opts.Handler on ln until ctx is done, then shuts down
// within shutdownBound, and returns once everything it started has ended.
// It returns an error only when ln fails on its own.
func Serve(ctx context.Context, ln net.Listener, opts Options) error {
	limit := max(opts.Limit, 1)
	srv := newHTTPServer(opts.Handler, opts.Log)
	l := newConnLimiter(ln, limit, opts)
	srv.ConnState = l.trackState
	defer opts.Counters.Limit.Add(-int64(limit))

	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	select {
	case err := <-served:
		_ = srv.Close() // the listener is gone; close what it accepted
		l.wait()
		return fmt.Errorf("serving %q: %w", ln.Addr().String(), err)
	case <-ctx.Done():
	}
	// Connections without a whole request have nothing to answer and
	// would hold Shutdown until their header timeout: close them first.
	l.shutdown()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownBound)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		opts.Log(slog.LevelWarn, "health: shutdown bound reached; closing the connections still open", "bound", shutdownBound)
		_ = srv.Close()
	}
	<-served
	l.wait()
	return nil
}

// newHTTPServer returns the http.Server that serves handler behind the
// limiter, logging to log.
func newHTTPServer(handler http.Handler, log LogFunc) *http.Server {
	srv := &http.Server{
		Handler:           closeAfterBody{handler: handler},
		ReadHeaderTimeout: headerTimeout,
		ReadTimeout:       headerTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		// net/http's own OPTIONS * handler answers 200 with none of
		// the handler's headers, and reads up to 4 KiB of body first.
		DisableGeneralOptionsHandler: true,
		ErrorLog:                     stdlog.New(errorLogWriter(log), "", 0),
	}
	// A probe is one request on one connection; keep-alive would only
	// let a client hold a slot between requests.
	srv.SetKeepAlivesEnabled(false)
	limitHeaderValues(srv)
	return srv
}

// errorLogWriter is net/http's ErrorLog: its rare lines (a temporary
// accept error, a handler's panic) come from the goroutine that accepts
// connections or one holding a slot, so they go to the caller's LogFunc,
// which never waits, at ERROR.
type errorLogWriter LogFunc

func (w errorLogWriter) Write(p []byte) (int, error) {
	w(slog.LevelError, strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

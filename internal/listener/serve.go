// Package listener is how bytes reach the probe handler: a listener that
// no local process can use to cost the kubelet its probe, or the agent
// its CPU, memory or descriptors.
//
// Anything that can reach the port can use it. A liveness probe that
// fails restarts the agent, and the restart runs its drain path, which
// tears the data plane down; so every resource a connection can hold is
// bounded, and a flood must cost the agent no more than it costs a plain
// net/http server. The design, in the order a connection meets it:
//
//   - Accept is deferred (TCP_DEFER_ACCEPT on Linux): a client that sends
//     nothing waits in the kernel, about 31 s, at no cost to the process.
//   - Each accepted connection is peeked at (MSG_PEEK), without consuming
//     its bytes. A header over 4 KiB or 64 lines is refused with
//     net/http's 431; a client already gone is closed; a whole plain probe
//     is answered there and then by the short path, with the bytes
//     net/http would write, so a queue of complete requests drains at the
//     kernel's pace.
//   - On Linux, a connection whose header is not yet whole waits in the
//     waiting room: an edge-triggered epoll set of the package's own,
//     with no goroutine or buffer per connection, until its header is
//     whole, its client goes, 2 s pass since its accept (closed, as
//     net/http's ReadHeaderTimeout would), or room is needed (the one
//     that waited longest is closed: an eviction). Evicting from
//     goroutines instead turned a flood into a reconnect storm that cost
//     many times a plain server's CPU (SPEC v4).
//   - net/http gets the rest, in at most 256 slots (a quarter of the
//     soft descriptor limit), each counted until its goroutine ends. On
//     Linux they hold whole headers, and partial ones whose client shut
//     its side, answered in microseconds (but what the room cannot hold:
//     see connLimiter); elsewhere they also hold what waits, and the one
//     that has waited longest without a request is evicted to make room. The guards
//     (guards.go) stop what net/http itself would hold on to: OPTIONS *,
//     bodies, the linger after a refusal, Expect, header lines.
//   - Out of descriptors, Accept makes room at once rather than back off.
//
// Nothing here waits for a log sink: every line goes to the caller's
// LogFunc, at most once a minute per kind.
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

// logGate lets a log line through at most once a minute: clients can
// provoke each of Serve's warnings, and must not write to the agent's log
// at will. Its owner's lock guards it.
type logGate struct{ last time.Time }

// due reports whether the line may be written now, and if so starts the
// next minute.
func (g *logGate) due(now time.Time) bool {
	if now.Sub(g.last) < time.Minute {
		return false
	}
	g.last = now
	return true
}

// Response is a fixed answer of the root's handler, as the short path
// writes it.
type Response struct {
	Status int
	// Header holds the handler's header lines, each ending in CRLF, in
	// the order net/http writes them: sorted by name.
	Header []byte
	Body   []byte
}

// AnswerFunc answers a request the short path parsed (one of its known
// methods, and a path of unreserved bytes and '/', or "*", which net/http
// would hand its handler unchanged) as the root's handler does, and
// returns the counter that handler would count it in; or nil, for
// net/http to serve the request.
// It must not block, allocate or keep path and rawQuery, which are the
// short path's buffer.
type AnswerFunc func(method string, path, rawQuery []byte) (*Response, *atomic.Uint64)

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

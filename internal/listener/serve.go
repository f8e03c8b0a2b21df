// Package listener is how bytes reach the probe handler: a listener that
// no local process can use to cost the kubelet its probe, or the agent its
// CPU, memory or descriptors, since a failed liveness probe restarts the
// agent and its restart tears the data plane down. Every resource a
// connection holds is bounded, and a flood costs no more than it costs a
// plain net/http server.
//
// On Linux a probe takes one route, each step's why in its file: accept.go
// accepts, deferred until the first bytes arrive (deferaccept_linux.go),
// and peeks; room.go keeps a connection whose header is not yet whole;
// request.go parses the header; answer.go writes net/http's answer; hold.go
// holds the connection after it as net/http would. net/http, behind a
// bound with eviction (slots.go) and guards against its own holds
// (guards.go), gets only a whole header the room does not answer, and
// what the room cannot hold (one without a descriptor, or once the room
// has failed); outside Linux, every connection.
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

// The bounds of what a connection may hold, far above a probe's needs.
const (
	// headerTimeout bounds a request's arrival, from accept: the kubelet
	// sends at once and gives up after 1 s by default, so longer only
	// helps a slowloris client. As net/http's ReadTimeout, it also ends
	// the drain of a body.
	headerTimeout = 2 * time.Second
	// writeTimeout bounds the answer against a client that does not read.
	writeTimeout = 2 * time.Second
	idleTimeout  = 2 * time.Second
	// maxHeaderBytes is net/http's MaxHeaderBytes; see maxRequestBytes.
	maxHeaderBytes = 4 << 10
	// shutdownBound is how long Serve waits, once ctx is done, for
	// requests in flight before it closes every connection.
	shutdownBound = 5 * time.Second
)

// LogFunc writes a log line as slog.Logger.Log does. Serve calls it from
// the goroutines that accept connections, so it must not wait for a sink.
type LogFunc func(level slog.Level, msg string, args ...any)

// logGate lets a log line through at most once a minute: clients can
// provoke each of Serve's warnings, and must not fill the agent's log. Its
// owner's lock guards it.
type logGate struct{ last time.Time }

// due reports whether the line may be written now.
func (g *logGate) due(now time.Time) bool {
	if now.Sub(g.last) < time.Minute {
		return false
	}
	g.last = now
	return true
}

// Response is a fixed answer of the root's handler.
type Response struct {
	Status int
	// Header holds the handler's header lines, each ending in CRLF, in
	// the order net/http writes them: sorted by name.
	Header []byte
	Body   []byte
}

// AnswerFunc answers a request parseRequest took, whose path net/http
// would hand its handler unchanged, as the root's handler does, and
// returns the counter that handler would count it in; or nil, for net/http
// to serve the request. It must not block, allocate or keep path and
// rawQuery, which are a reader's buffer.
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

func (c *Counters) countEviction() {
	c.Evicted.Add(1)
	c.LastEviction.Store(MonotonicNow())
}

var monotonicBase = time.Now()

// MonotonicNow is the time since the package was loaded on the monotonic
// clock, never 0, so that 0 can mean none: a step of the wall clock moves
// none of the times kept with it.
func MonotonicNow() int64 { return int64(time.Since(monotonicBase)) + 1 }

// Options are what Serve needs from its caller.
type Options struct {
	Handler  http.Handler // what net/http serves
	Answer   AnswerFunc   // nil: net/http answers everything
	Counters *Counters
	Log      LogFunc
	Limit    int // the bound on net/http's slots: DefaultLimit, or a test's

	// room is the waiting room's size for a test: 0 for roomSize's, -1
	// for none, as outside Linux.
	room int
}

// DefaultLimit is the bound on net/http's slots for this process (limitFor).
func DefaultLimit() int { return limitFor(softDescriptorLimit()) }

// Listen binds addr over TCP with accept deferred from the first
// connection on (see setDeferAccept).
func Listen(addr string) (net.Listener, error) {
	lc := net.ListenConfig{
		KeepAlive: -1, // a connection lives seconds at most: keep-alive would only cost system calls
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
	var failed error
	select {
	case err := <-served: // the listener failed: end the rest as a shutdown does
		failed = fmt.Errorf("serving %q: %w", ln.Addr().String(), err)
	case <-ctx.Done():
	}
	l.shutdown()
	if failed != nil {
		// After shutdown, which has read what each slot without a request
		// was sent: closed first by net/http, one whose goroutine had not
		// read its header yet would be reset.
		_ = srv.Close()
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownBound)
	defer cancel()
	if failed == nil {
		if err := srv.Shutdown(shutdownCtx); err != nil {
			opts.Log(slog.LevelWarn, "health: shutdown bound reached; closing the connections still open", "bound", shutdownBound)
			_ = srv.Close()
		}
		<-served
	}
	l.finish(shutdownCtx)
	l.wait()
	return failed
}

// newHTTPServer returns the http.Server that serves handler behind the
// limiter.
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
		ConnContext: func(ctx context.Context, nc net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, nc)
		},
		ErrorLog: stdlog.New(errorLogWriter(log), "", 0),
	}
	srv.SetKeepAlivesEnabled(false) // keep-alive would only let a client hold a slot between requests
	limitHeaderValues(srv)
	return srv
}

// errorLogWriter sends net/http's rare ErrorLog lines (a temporary accept
// error, a handler's panic) to the caller's LogFunc, at ERROR.
type errorLogWriter LogFunc

func (w errorLogWriter) Write(p []byte) (int, error) {
	w(slog.LevelError, strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

package health

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"syscall"
	"time"
)

// The listener's bounds. Anything that can reach the port can use it, so
// every resource a connection can hold is bounded; each bound is far above
// what a probe needs (one small request, sent at once, one small answer).
const (
	// readHeaderTimeout bounds a request header's arrival. The kubelet
	// sends its request at once and gives up after its own timeout
	// (1 s by default), so longer only helps a slowloris client.
	readHeaderTimeout = 2 * time.Second
	// readTimeout bounds the whole request. Serve reads no body, so it
	// only backs up readHeaderTimeout.
	readTimeout = 2 * time.Second
	// writeTimeout bounds the answer, a few hundred bytes, against a
	// client that does not read.
	writeTimeout = 2 * time.Second
	// idleTimeout bounds a connection between requests. Keep-alive is off,
	// so none should wait there; the bound makes sure.
	idleTimeout = 2 * time.Second
	// maxHeaderBytes is net/http's MaxHeaderBytes. net/http reads up to
	// 4 KiB more before it gives up; the connection stops it earlier, at
	// maxRequestBytes, which says why.
	maxHeaderBytes = 4 << 10
	// shutdownBound is how long Serve waits, once ctx is done, for
	// requests in flight before it closes every connection.
	shutdownBound = 5 * time.Second
)

// Listen binds the configured address (Config.Listen) over TCP, so that
// the agent can fail fast on an address in use before it registers. It
// returns (nil, nil) when the config is disabled. A bind to anything but
// loopback is logged once as a warning, because the endpoints are
// unauthenticated.
func (s *Server) Listen() (net.Listener, error) {
	if !s.cfg.IsEnabled() {
		return nil, nil
	}
	if err := s.cfg.Validate(); err != nil {
		return nil, err
	}
	// No TCP keep-alive on accepted connections: a probe's connection
	// lives for one request and a few seconds at most, so keep-alive would
	// only cost four system calls on every accept. Accept is deferred from
	// the moment the socket listens, before Serve runs.
	lc := net.ListenConfig{
		KeepAlive: -1,
		Control:   func(_, _ string, rc syscall.RawConn) error { return setDeferAccept(rc) },
	}
	ln, err := lc.Listen(context.Background(), "tcp", s.cfg.Listen)
	if isAddressInUse(err) {
		return nil, &addrInUseError{addr: s.cfg.Listen, err: err}
	}
	if err != nil {
		return nil, fmt.Errorf("health: listen %q: %w", s.cfg.Listen, err)
	}
	if a, ok := ln.Addr().(*net.TCPAddr); !ok || !a.IP.IsLoopback() {
		s.logAsync(context.Background(), slog.LevelWarn, "health: listening on a non-loopback address; the probe endpoints are unauthenticated", "addr", ln.Addr().String())
	}
	return ln, nil
}

// addrInUseError is Listen's error when the port is taken. Its text is its
// own, so that it says "address already in use" once and explains the
// likely cause, rather than appending the system's error, which says the
// same words again; Unwrap keeps that error, so errors.Is(err,
// syscall.EADDRINUSE) still holds.
type addrInUseError struct {
	addr string
	err  error
}

func (e *addrInUseError) Error() string {
	return fmt.Sprintf("health: listen %q: address already in use; under hostNetwork the port space is the node's, so another host-networked workload probably holds this port", e.addr)
}

func (e *addrInUseError) Unwrap() error { return e.err }

// Serve serves Handler on ln until ctx is done, then shuts down within 5 s,
// closing whatever connections are still open, and returns nil once every
// goroutine it started has ended. It returns an error when ln fails on its
// own. Serve takes ownership of ln and closes it. It logs one line when it
// starts serving, naming the address, and one when it has stopped. Its
// lines go through the Server's log queue, like every line of the
// Server's, so that a log sink that blocks never holds Serve: the last of
// them may be written just after Serve returns, by the queue's writer.
//
// With a nil ln, Serve returns nil at once when the config is disabled
// (Listen returned nil) and an error when it is enabled. A non-nil ln is
// served even when the config is disabled: the caller made it on purpose,
// and a listener nobody serves would fail every probe.
//
// Anything that can reach the port can use it, so Serve bounds what a
// connection can hold and how many it holds: at most a quarter of the soft
// descriptor limit read when Serve starts, and at most 256. To make room it
// closes the connection that has waited longest without sending a request,
// never a newcomer and never one being answered, so no number of stalled
// or silent local clients can cost the kubelet its probe. A request header
// may be 4 KiB and 64 lines at most (more gets net/http's 431); OPTIONS *
// gets the handler's 404, not net/http's own answer; and Serve never reads
// a request body: a request that declares one is answered and its
// connection closed at once. On Linux, Serve has the kernel hold a
// connection until its first bytes arrive, for up to 30 s, which needs ln
// to be a TCP socket, as Listen's is.
//
// On Unix, a plain probe (GET or HEAD of exactly /healthz or /readyz, with
// nothing unusual in its header) whose request has arrived whole when its
// connection is accepted is answered there and then, with the very bytes
// net/http would write and counted alike, without a goroutine or buffers
// of its own: a local client that fills the kernel's accept queue with
// complete requests then delays the kubelet's probe by microseconds per
// request, not by the cost of a net/http connection. Every other request
// is served by net/http.
//
// On Linux, a connection the kernel hands over empty all the same (a SYN
// cookie, once silent clients fill its queue) is held apart under
// pressure (the slots near full, a quarter of them waiting for requests
// not begun, or a recent eviction), without a goroutine, until it speaks,
// for about 100 ms (see quarantine), in the descriptors the slots leave:
// one Serve call holds at most three times its bound in all (and for a
// moment one more, being handed on), three quarters of the soft limit.
// That is per call: Serve on n listeners may hold n times as much, so an
// agent that serves more than one needs a soft limit of at least 1024 per
// listener to keep a quarter for itself. Only a ln that is a
// *net.TCPListener itself, as Listen's is, gets this hold: a wrapper's
// Accept may block, and the held connections that have spoken would wait
// with it, so behind a wrapper they take slots at once.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if ln == nil {
		if !s.cfg.IsEnabled() {
			return nil
		}
		return errors.New("health: Serve: the listener is nil but the config is enabled; pass the listener Listen returned")
	}
	return s.serve(contextOrBackground(ctx), ln, connLimit(softDescriptorLimit()))
}

// httpServer returns the http.Server that serves s's probes behind the
// limiter, whose ConnState hook is connState.
func (s *Server) httpServer(connState func(net.Conn, http.ConnState)) *http.Server {
	srv := &http.Server{
		Handler:           closeAfterBody{handler: s.Handler()},
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		// net/http's own OPTIONS * handler answers 200 with none of
		// the package's headers, and reads up to 4 KiB of body before
		// it answers, holding a connection that cannot be evicted.
		DisableGeneralOptionsHandler: true,
		ConnState:                    connState,
		ErrorLog:                     log.New(errorLogWriter{s}, "", 0),
	}
	// A probe is one request on one connection; keep-alive would only let
	// a client hold a slot between requests.
	srv.SetKeepAlivesEnabled(false)
	limitHeaderValues(srv)
	return srv
}

// serve is Serve with the connection bound given, so that tests can use a
// small one.
func (s *Server) serve(ctx context.Context, ln net.Listener, limit int) error {
	addr := ln.Addr().String()
	limiter := newConnLimiter(ln, limit, &s.conns, s.logAsync)
	limiter.short = newShortPath(s)
	defer s.conns.limit.Add(-int64(limit))
	srv := s.httpServer(limiter.trackState)
	s.logAsync(context.Background(), slog.LevelInfo, "health: serving probes", "addr", addr, "max_conns", limit)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(limiter) }()
	select {
	case err := <-served:
		_ = srv.Close() // the listener is gone; close what it accepted
		limiter.wait()
		s.logAsync(context.Background(), slog.LevelError, "health: stopped serving probes: the listener failed", "addr", addr, "err", err)
		return fmt.Errorf("health: serving %q: %w", addr, err)
	case <-ctx.Done():
	}

	// Connections without a request have nothing to answer and would
	// hold Shutdown until their header timeout: close them first.
	limiter.shutdown()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownBound)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		s.logAsync(context.Background(), slog.LevelWarn, "health: shutdown bound reached; closing the connections still open", "bound", shutdownBound)
		_ = srv.Close()
	}
	<-served
	limiter.wait()
	s.logAsync(context.Background(), slog.LevelInfo, "health: stopped serving probes", "addr", addr)
	return nil
}

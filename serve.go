package health

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"

	"github.com/meshnode/health/internal/listener"
)

// Listen binds Config.Listen over TCP, to fail fast on an address in use;
// (nil, nil) when disabled. A bind beyond loopback is logged as a warning.
func (s *Server) Listen() (net.Listener, error) {
	if !s.cfg.IsEnabled() {
		return nil, nil
	}
	if err := s.cfg.Validate(); err != nil {
		return nil, err
	}
	ln, err := listener.Listen(s.cfg.Listen)
	if listener.IsAddressInUse(err) {
		return nil, &addrInUseError{addr: s.cfg.Listen, err: err}
	}
	if err != nil {
		return nil, fmt.Errorf("health: listen %q: %w", s.cfg.Listen, err)
	}
	if a, ok := ln.Addr().(*net.TCPAddr); !ok || !a.IP.IsLoopback() {
		s.logAsync(slog.LevelWarn, "health: listening on a non-loopback address; the probe endpoints are unauthenticated", "addr", ln.Addr().String())
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

// Serve serves Handler's answers on ln until ctx is done, then stops
// accepting, lets each connection it holds reach its end (within 5 s) and
// returns nil, or an error once ln fails on its own. It owns ln, which is
// Listen's or another *net.TCPListener: on Linux it accepts on the socket
// itself. It returns once every connection and goroutine of its own has
// ended; its log lines go through the Server's queue (NewServer), so the
// last may follow. A nil ln is an error unless the config is disabled (a
// non-nil one is served even then). What a connection may hold is bounded
// (README, Limits).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if ln == nil {
		if !s.cfg.IsEnabled() {
			return nil
		}
		return errors.New("health: Serve: the listener is nil but the config is enabled; pass the listener Listen returned")
	}
	return s.serve(contextOrBackground(ctx), ln)
}

// serve is Serve on a non-nil ln.
func (s *Server) serve(ctx context.Context, ln net.Listener) error {
	err := listener.Serve(ctx, ln, listener.Options{
		Answer:   s.answer,
		Handler:  s.Handler(),
		Counters: &s.conns,
		Log:      s.logAsync,
	})
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	return nil
}

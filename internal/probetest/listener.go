package probetest

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"
)

// Listen returns a fresh TCP listener on 127.0.0.1:0, closed at the
// test's end.
func Listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}

// PlainServer is the plain net/http server Serve is compared with: h
// behind Serve's bounds (2 s for a header and for an answer, a 4 KiB
// header, keep-alive off), with net/http's own OPTIONS * answer off, so
// that OPTIONS * reaches h as it reaches the root's answers.
func PlainServer(h http.Handler) *http.Server {
	srv := &http.Server{
		Handler:                      h,
		ReadHeaderTimeout:            2 * time.Second,
		ReadTimeout:                  2 * time.Second,
		WriteTimeout:                 2 * time.Second,
		IdleTimeout:                  2 * time.Second,
		MaxHeaderBytes:               4 << 10,
		DisableGeneralOptionsHandler: true,
	}
	srv.SetKeepAlivesEnabled(false)
	return srv
}

// ServeHTTP runs srv on a fresh 127.0.0.1:0 listener and returns its
// address. At the test's end it shuts srv down, and fails the test if that
// takes 10 s or Serve returns anything but http.ErrServerClosed.
func ServeHTTP(t testing.TB, srv *http.Server) string {
	t.Helper()
	ln := Listen(t)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("the plain server's shutdown: %v", err)
			_ = srv.Close()
		}
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("the plain server's Serve returned %v", err)
		}
	})
	return ln.Addr().String()
}

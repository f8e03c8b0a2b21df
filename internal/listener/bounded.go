package listener

import (
	"container/list"
	"context"
	"log"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// shutdownBound is how long serveHTTP waits for net/http's connections.
const shutdownBound = 5 * time.Second

// serveHTTP is Serve through a plain http.Server with the loop's bounds:
// holdTimeout for a header and for an answer, maxHeader, keep-alive off,
// and at most limit connections, the oldest closed to make room. It is
// Serve outside Linux, which has no epoll, and is built on Linux too, so
// that the tests run there exercise it.
func serveHTTP(ctx context.Context, ln net.Listener, opts Options, limit int) error {
	b := &boundedListener{Listener: ln, limit: limit, opts: opts}
	srv := &http.Server{
		Handler:           opts.Handler,
		ReadHeaderTimeout: holdTimeout,
		ReadTimeout:       holdTimeout,
		WriteTimeout:      holdTimeout,
		IdleTimeout:       holdTimeout,
		MaxHeaderBytes:    maxHeader,
		// Its own OPTIONS * answer would carry none of the handler's headers.
		DisableGeneralOptionsHandler: true,
		ConnState:                    b.track,
		ErrorLog:                     log.New(errorLog(opts.Log), "", 0),
	}
	srv.SetKeepAlivesEnabled(false) // a probe is one request on one connection
	served := make(chan error, 1)
	serving(&opts, ln, limit)
	go func() { served <- srv.Serve(b) }()
	var failed error
	select {
	case failed = <-served:
	case <-ctx.Done():
		shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownBound)
		defer cancel()
		if srv.Shutdown(shutdownCtx) != nil {
			opts.Log(slog.LevelWarn, "health: shutdown bound reached; closing the connections still open", "bound", shutdownBound)
		}
		<-served
	}
	_ = srv.Close()
	b.serving.Wait()
	return failed
}

// boundedListener is the listener serveHTTP gives net/http. When full, it
// closes the connection accepted first, never turning a newcomer away: a
// bound that refused newcomers would let a few hundred silent clients lock
// the kubelet out.
type boundedListener struct {
	net.Listener
	limit   int
	opts    Options
	serving sync.WaitGroup // the goroutines net/http serves connections on

	mu             sync.Mutex
	open           list.List // of *boundedConn, the oldest first
	fullLog, fdLog logGate
}

// Accept accepts, making room when full, and when the process is out of
// descriptors, where net/http would back off while the kubelet's
// connection waits in the kernel's queue.
func (b *boundedListener) Accept() (net.Conn, error) {
	for {
		nc, err := b.Listener.Accept()
		switch {
		case err == nil:
			c := &boundedConn{Conn: nc, b: b}
			b.mu.Lock()
			full := b.open.Len() >= b.limit
			c.entry = b.open.PushBack(c)
			b.mu.Unlock()
			if full { // the front is another, older
				b.evict(&b.fullLog, "health: the probe listener is full; closing the connections held longest to make room")
			}
			b.opts.Counters.Accepted.Add(1)
			b.opts.Counters.Held.Add(1)
			return c, nil
		case !isOutOfDescriptors(err):
			return nil, err
		case !b.evict(&b.fdLog, "health: out of file descriptors; closing the connections held longest to make room"):
			time.Sleep(descriptorRetry)
		}
	}
}

// evict closes the oldest connection, says why at most once a minute, and
// reports whether there was one.
func (b *boundedListener) evict(gate *logGate, msg string) bool {
	b.mu.Lock()
	front := b.open.Front()
	due := front != nil && gate.due(time.Now())
	b.mu.Unlock()
	if front == nil {
		return false
	}
	_ = front.Value.(*boundedConn).Close()
	b.opts.Counters.countEviction()
	if due {
		b.opts.Log(slog.LevelWarn, msg, "limit", b.limit)
	}
	return true
}

func (b *boundedListener) track(_ net.Conn, state http.ConnState) {
	switch state {
	case http.StateNew:
		b.serving.Add(1)
	case http.StateClosed, http.StateHijacked:
		b.serving.Done()
	}
}

// boundedConn is a connection counted until it is closed.
type boundedConn struct {
	net.Conn
	b     *boundedListener
	entry *list.Element // in b.open; nil once closed. Guarded by b.mu
}

func (c *boundedConn) Close() error {
	c.b.mu.Lock()
	if c.entry != nil {
		c.b.open.Remove(c.entry)
		c.entry = nil
		c.b.opts.Counters.Held.Add(-1)
	}
	c.b.mu.Unlock()
	return c.Conn.Close()
}

// errorLog takes net/http's rare ErrorLog lines (a handler's panic, an
// accept error it retries) to the caller's log at ERROR: none is per
// request.
type errorLog LogFunc

func (w errorLog) Write(p []byte) (int, error) {
	w(slog.LevelError, strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

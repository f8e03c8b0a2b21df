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

// shutdownBound is how long serveHTTP waits, once ctx is done, for the
// connections net/http holds before it closes them.
const shutdownBound = 5 * time.Second

// serveHTTP is Serve through a plain http.Server with the loop's bounds:
// holdTimeout for a header and for an answer, maxHeader, keep-alive off,
// and at most limit connections, the one held longest closed to make room.
// It is Serve outside Linux, where there is no epoll; it is built on Linux
// too, so that the tests run there exercise it.
func serveHTTP(ctx context.Context, ln net.Listener, opts Options, limit int) error {
	b := &boundedListener{Listener: ln, limit: limit, opts: opts}
	srv := &http.Server{
		Handler:           opts.Handler,
		ReadHeaderTimeout: holdTimeout,
		ReadTimeout:       holdTimeout,
		WriteTimeout:      holdTimeout,
		IdleTimeout:       holdTimeout,
		MaxHeaderBytes:    maxHeader,
		// Its own OPTIONS * answer would carry none of the handler's
		// headers.
		DisableGeneralOptionsHandler: true,
		ConnState:                    b.track,
		ErrorLog:                     log.New(&gatedLog{log: opts.Log}, "", 0),
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

// boundedListener is the listener serveHTTP gives net/http: it keeps at
// most limit connections open, and when full closes the one accepted
// first, never turning a newcomer away: a bound that refused newcomers
// would let a few hundred silent clients lock the kubelet out.
type boundedListener struct {
	net.Listener
	limit int
	opts  Options
	// serving counts the connections whose goroutines have not ended.
	serving sync.WaitGroup

	mu             sync.Mutex
	open           list.List // of *boundedConn, by accept, the oldest first
	fullLog, fdLog logGate
}

// Accept accepts, closing the oldest connection when full, and when the
// process is out of descriptors, where net/http would back off while the
// kubelet's connection waits in the kernel's queue.
func (b *boundedListener) Accept() (net.Conn, error) {
	for {
		nc, err := b.Listener.Accept()
		if err == nil {
			return b.admit(nc), nil
		}
		if !isOutOfDescriptors(err) {
			return nil, err
		}
		if !b.evict(&b.fdLog, "health: out of file descriptors; closing the connections held longest to make room") {
			time.Sleep(descriptorRetry) // nothing to close: only time frees a descriptor
		}
	}
}

func (b *boundedListener) admit(nc net.Conn) net.Conn {
	for b.count() >= b.limit && b.evict(&b.fullLog, "health: the probe listener is full; closing the connections held longest to make room") {
	}
	c := &boundedConn{Conn: nc, b: b}
	b.mu.Lock()
	c.entry = b.open.PushBack(c)
	b.mu.Unlock()
	b.opts.Counters.Accepted.Add(1)
	b.opts.Counters.Held.Add(1)
	return c
}

func (b *boundedListener) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.open.Len()
}

// evict closes the oldest connection open, and reports whether there was
// one.
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

// track counts the goroutines net/http serves connections on, so that
// serveHTTP returns only once they have ended.
func (b *boundedListener) track(_ net.Conn, state http.ConnState) {
	switch state {
	case http.StateNew:
		b.serving.Add(1)
	case http.StateClosed, http.StateHijacked:
		b.serving.Done()
	}
}

// boundedConn is a connection boundedListener counts until it is closed.
type boundedConn struct {
	net.Conn
	b      *boundedListener
	entry  *list.Element
	closed bool // guarded by b.mu
}

func (c *boundedConn) Close() error {
	c.b.mu.Lock()
	if !c.closed {
		c.closed = true
		c.b.open.Remove(c.entry)
		c.b.opts.Counters.Held.Add(-1)
	}
	c.b.mu.Unlock()
	return c.Conn.Close()
}

// gatedLog takes net/http's rare ErrorLog lines (a temporary accept error,
// a handler's panic) to the caller's log at ERROR, at most once a minute.
type gatedLog struct {
	log  LogFunc
	mu   sync.Mutex
	gate logGate
}

func (g *gatedLog) Write(p []byte) (int, error) {
	g.mu.Lock()
	due := g.gate.due(time.Now())
	g.mu.Unlock()
	if due {
		g.log(slog.LevelError, strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

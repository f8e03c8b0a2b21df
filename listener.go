package health

import (
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// maxConns bounds the connections Serve holds at once, and with them its
// goroutines and memory (a goroutine and a few KiB of buffers each). It is
// far below a default file-descriptor limit of 1024, so the agent's own
// descriptors are never starved by its probe port.
const maxConns = 256

// connState is where a held connection stands, which decides whether it may
// be closed to make room.
type connState uint8

const (
	// connWaiting: no complete request header yet. Evictable, oldest
	// first: a probe sends its whole request at once, so a connection that
	// has waited longest without one is the one most likely stalling.
	connWaiting connState = iota
	// connComplete: a whole request header has arrived and is being
	// answered, which takes microseconds. Never evicted.
	connComplete
	// connAnswered: the answer has been written; all that is left is
	// net/http's clean-up. Evicted before any waiting connection.
	connAnswered
	// connReleased: closed and no longer counted.
	connReleased
)

// connLimiter is a net.Listener that holds at most max connections. When a
// new connection would exceed the bound, it closes an answered connection,
// or else the one that has waited longest without a complete request, and
// never the newcomer.
//
// A bound that refused newcomers instead would let max stalled clients
// lock the kubelet out; no bound would let attackers grow the agent's
// memory without limit. Evicting the oldest incomplete connection costs a
// probe nothing as long as a probe's request is complete when it is
// accepted. So, once the bound has been reached, the limiter is under
// pressure: on Linux it makes the kernel hand over a connection only once
// its first bytes have arrived (setDeferAccept), and Accept looks at the
// bytes already received to see whether the request is whole
// (requestComplete). A client that connects and stays silent then waits in
// the kernel's queue, costing the process no descriptor, while its request,
// once sent, arrives there all the same; a probe that is slow to write
// (a busy kubelet) is accepted with its request in hand instead of growing
// old, empty, in a churning pool.
//
// Deferring accept costs every connection a little latency, so the limiter
// defers only under pressure, and lifts it once the connections held have
// fallen to half the bound.
type connLimiter struct {
	net.Listener
	max    int
	logger *slog.Logger

	// Used by Accept only: http.Server calls it from one goroutine.
	peek          []byte // scratch buffer for requestComplete
	underPressure bool
	lastWarning   time.Time

	mu       sync.Mutex
	released sync.Cond // signalled when a connection stops being protected
	held     int
	answered connList
	waiting  connList
	closing  bool // Serve is shutting down: no waiting connection is kept

	// served counts accepted connections whose net/http goroutine has not
	// yet ended, so that Serve returns only after all of them have.
	served sync.WaitGroup
}

func newConnLimiter(ln net.Listener, max int, logger *slog.Logger) *connLimiter {
	l := &connLimiter{Listener: ln, max: max, logger: logger, peek: make([]byte, maxHeaderBytes)}
	l.released.L = &l.mu
	return l
}

// Accept accepts the next connection and, if that takes the count past
// max, closes others to make room, waiting only in the rare case that every
// other held connection is being answered at that moment.
func (l *connLimiter) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c := &limitedConn{Conn: nc, limiter: l}
	complete := l.underPressure && requestComplete(nc, l.peek)

	l.mu.Lock()
	defer l.mu.Unlock()
	l.served.Add(1)
	l.held++
	l.updatePressure()
	if complete {
		c.state = connComplete
		c.scanned = true
	} else {
		l.waiting.pushBack(c)
	}
	if l.closing && !complete {
		l.evict(c)
		return c, nil
	}
	for l.held > l.max {
		victim := l.answered.front()
		if victim == nil {
			victim = l.waiting.front()
		}
		if victim == nil || victim == c {
			if l.closing {
				break
			}
			l.released.Wait()
			continue
		}
		l.evict(victim)
	}
	return c, nil
}

// updatePressure turns deferred accept on when the bound is exceeded and off
// when the connections held have fallen to half of it; the gap keeps it
// from flapping. l.mu must be held.
func (l *connLimiter) updatePressure() {
	switch {
	case !l.underPressure && l.held > l.max:
		l.underPressure = true
		if err := setDeferAccept(l.Listener, true); err != nil {
			l.logger.Warn("health: cannot defer accept; silent connections will take connection slots", "err", err)
		}
		// At most one line a minute, however an attacker makes the
		// pressure come and go: the log must not be a lever.
		if now := time.Now(); now.Sub(l.lastWarning) >= time.Minute {
			l.lastWarning = now
			l.logger.Warn("health: connection slots full; closing the oldest connections that have not sent a request", "slots", l.max)
		}
	case l.underPressure && l.held <= l.max/2:
		l.underPressure = false
		if err := setDeferAccept(l.Listener, false); err != nil {
			l.logger.Warn("health: cannot stop deferring accept", "err", err)
		}
	}
}

// evict closes c and stops counting it. Its net/http goroutine sees the
// closed connection on its next read or write and ends. l.mu must be held.
func (l *connLimiter) evict(c *limitedConn) {
	l.release(c)
	_ = c.Conn.Close()
}

// release stops counting c, once. l.mu must be held.
func (l *connLimiter) release(c *limitedConn) {
	switch c.state {
	case connReleased:
		return
	case connWaiting:
		l.waiting.remove(c)
	case connAnswered:
		l.answered.remove(c)
	}
	c.state = connReleased
	l.held--
	l.released.Signal()
}

// sawRequest marks c as holding a complete request: protected from
// eviction until it is answered.
func (l *connLimiter) sawRequest(c *limitedConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.state == connWaiting {
		l.waiting.remove(c)
		c.state = connComplete
	}
}

// wroteAnswer marks c as answered: first in line for eviction.
func (l *connLimiter) wroteAnswer(c *limitedConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch c.state {
	case connWaiting:
		l.waiting.remove(c)
	case connComplete:
	default:
		return
	}
	c.state = connAnswered
	l.answered.pushBack(c)
	l.released.Signal()
}

// shutdown closes every connection that is not being answered and makes
// Accept close any new one that arrives without a complete request: they
// have nothing to answer and would only hold Serve's shutdown until their
// header timeout.
func (l *connLimiter) shutdown() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closing = true
	for c := l.answered.front(); c != nil; c = l.answered.front() {
		l.evict(c)
	}
	for c := l.waiting.front(); c != nil; c = l.waiting.front() {
		l.evict(c)
	}
	l.released.Broadcast()
}

// connState is the http.Server's ConnState hook. StateClosed is reported by
// a connection's own goroutine as its last act, which is what wait waits
// for.
func (l *connLimiter) connState(_ net.Conn, state http.ConnState) {
	if state == http.StateClosed {
		l.served.Done()
	}
}

// wait returns once the goroutine of every accepted connection has ended.
func (l *connLimiter) wait() { l.served.Wait() }

// limitedConn is a connection held by a connLimiter. It watches the bytes
// read for the end of the request header and the first write of the
// answer, which is all the limiter needs to choose whom to evict.
type limitedConn struct {
	net.Conn
	limiter *connLimiter

	// Guarded by limiter.mu.
	state      connState
	prev, next *limitedConn

	// Used by the goroutine reading the connection only (net/http's reads
	// never overlap).
	scanned bool // the end of the header has been seen
	header  headerScanner
	wrote   bool // the first write has been reported
}

func (c *limitedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.scanned && c.header.scan(p[:n]) {
		c.scanned = true
		c.limiter.sawRequest(c)
	}
	return n, err
}

func (c *limitedConn) Write(p []byte) (int, error) {
	if !c.wrote {
		c.wrote = true
		c.limiter.wroteAnswer(c)
	}
	return c.Conn.Write(p)
}

// CloseWrite lets net/http half-close a connection whose request it did not
// read to the end, and wait for the client to read the answer, as it does
// with a bare *net.TCPConn.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *limitedConn) Close() error {
	c.limiter.mu.Lock()
	c.limiter.release(c)
	c.limiter.mu.Unlock()
	return c.Conn.Close()
}

// headerScanner finds the blank line that ends an HTTP/1 request header,
// across reads. net/http accepts "\n" as well as "\r\n" as a line end, so
// both count.
type headerScanner struct {
	lineEmpty bool // only '\r' since the last '\n'
}

func (s *headerScanner) scan(p []byte) bool {
	for _, b := range p {
		switch b {
		case '\n':
			if s.lineEmpty {
				return true
			}
			s.lineEmpty = true
		case '\r':
		default:
			s.lineEmpty = false
		}
	}
	return false
}

// connList is an intrusive doubly linked list of connections in the order
// they were added, so that finding the oldest and removing any one are
// O(1) under the limiter's lock.
type connList struct{ head, tail *limitedConn }

func (l *connList) front() *limitedConn { return l.head }

func (l *connList) pushBack(c *limitedConn) {
	c.prev, c.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = c
	} else {
		l.head = c
	}
	l.tail = c
}

func (l *connList) remove(c *limitedConn) {
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		l.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		l.tail = c.prev
	}
	c.prev, c.next = nil, nil
}

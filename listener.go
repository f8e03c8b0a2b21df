package health

import (
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// maxConns bounds the connections Serve holds at once, counting each until
// its goroutine has finished closing it, and with them Serve's goroutines
// and memory (a goroutine and a few KiB of buffers each). It is far below a
// default file-descriptor limit of 1024, so the agent's own descriptors are
// never starved by its probe port.
const maxConns = 256

// closingReserve is how many of the maxConns slots are kept for connections
// that have been evicted but whose goroutines have not yet finished closing
// them, and for complete requests being answered. Eviction starts this far
// below the bound, so under a flood Accept rarely has to wait for a
// goroutine to be scheduled before it can take the next connection.
const closingReserve = 32

// pressureCooldown is how long after the last eviction the limiter stops
// deferring accept. Lifting it as soon as the pool has room would let a
// churning client make it flap, and every probe accepted in an off spell
// would be unprotected when the next flood arrives.
const pressureCooldown = 10 * time.Second

// slotState is where a held connection stands, which decides whether it may
// be closed to make room.
type slotState uint8

const (
	// connWaiting: no complete request header yet. Evictable, oldest
	// first: a probe sends its whole request at once, so a connection that
	// has waited longest without one is the one most likely stalling.
	connWaiting slotState = iota
	// connComplete: a whole request header has arrived and is being
	// answered, which takes microseconds. Never evicted.
	connComplete
	// connAnswered: the answer has been written; all that is left is
	// net/http's clean-up. Evicted before any waiting connection.
	connAnswered
	// connEvicted: closed by the limiter; still counted until its
	// goroutine ends.
	connEvicted
	// connReleased: its goroutine has ended; no longer counted.
	connReleased
)

// connLimiter is a net.Listener that holds at most maxConns connections.
// When a new connection takes the count past maxConns - closingReserve, it
// closes an answered connection, or else the one that has waited longest
// without a complete request, and never the newcomer.
//
// A bound that refused newcomers instead would let maxConns stalled clients
// lock the kubelet out; no bound would let attackers grow the agent's
// memory without limit. Evicting the oldest incomplete connection costs a
// probe nothing as long as a probe's request is complete when it is
// accepted. So, once eviction has begun, the limiter is under pressure: on
// Linux it makes the kernel hand over a connection only once its first
// bytes have arrived (setDeferAccept), and Accept looks at the bytes
// already received to see whether the request is whole (requestComplete).
// A client that connects and stays silent then waits in the kernel's
// queue, costing the process no descriptor, while a request, once sent,
// arrives there all the same; a probe that is slow to write (a busy
// kubelet) is accepted with its request in hand instead of growing old,
// empty, in a churning pool.
//
// Deferring accept costs every connection a little latency, so the limiter
// defers only under pressure, and lifts it once no eviction has been needed
// for pressureCooldown.
type connLimiter struct {
	net.Listener
	logger *slog.Logger

	// Used by Accept only: http.Server calls it from one goroutine.
	peek          []byte // scratch buffer for requestComplete
	peekNext      bool   // whether the next newcomer is to be peeked at
	underPressure bool
	lastEviction  time.Time
	lastWarning   time.Time

	mu       sync.Mutex
	changed  sync.Cond // signalled when a connection is released or answered
	held     int       // accepted, and their goroutines not yet ended
	evicted  int       // of held, those closed by the limiter
	answered connList
	waiting  connList
	closing  bool // Serve is shutting down: no waiting connection is kept
}

func newConnLimiter(ln net.Listener, logger *slog.Logger) *connLimiter {
	l := &connLimiter{Listener: ln, logger: logger, peek: make([]byte, maxHeaderBytes)}
	l.changed.L = &l.mu
	return l
}

// Accept accepts the next connection and makes room for it. It waits only
// when every slot, the reserve included, is held by connections being
// answered or being closed, which ends in microseconds.
func (l *connLimiter) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c := &limitedConn{Conn: nc, limiter: l}
	complete := l.peekNext && requestComplete(nc, l.peek)

	l.mu.Lock()
	defer l.mu.Unlock()
	l.held++
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
	for !l.closing {
		if l.held-l.evicted > maxConns-closingReserve {
			if victim := l.victim(c); victim != nil {
				// Pressure first: once a client can see the
				// eviction, the kernel is already deferring.
				l.setPressure(true)
				l.lastEviction = time.Now()
				l.evict(victim)
				continue
			}
		}
		if l.held <= maxConns {
			break
		}
		l.changed.Wait()
	}
	if l.underPressure && time.Since(l.lastEviction) > pressureCooldown {
		l.setPressure(false)
	}
	// Peeking costs a system call, so it waits until the pool is filling:
	// an unpeeked newcomer is protected only once its goroutine has read
	// its request, which on a busy machine can come after many newer
	// connections have been accepted.
	l.peekNext = l.underPressure || l.held > maxConns/4
	return c, nil
}

// victim returns the connection to evict to make room for newcomer: an
// answered one, or else the oldest waiting one, never newcomer itself.
// l.mu must be held.
func (l *connLimiter) victim(newcomer *limitedConn) *limitedConn {
	if c := l.answered.front(); c != nil {
		return c
	}
	if c := l.waiting.front(); c != newcomer {
		return c
	}
	return nil
}

// setPressure turns deferred accept on or off. l.mu must be held.
func (l *connLimiter) setPressure(on bool) {
	if l.underPressure == on {
		return
	}
	l.underPressure = on
	if err := setDeferAccept(l.Listener, on); err != nil && !errors.Is(err, net.ErrClosed) {
		l.logger.Warn("health: cannot change deferred accept; silent connections may take connection slots", "defer", on, "err", err)
	}
	// At most one line a minute, however an attacker makes the pressure
	// come and go: the log must not be a lever.
	if now := time.Now(); on && now.Sub(l.lastWarning) >= time.Minute {
		l.lastWarning = now
		l.logger.Warn("health: connection slots full; closing the oldest connections that have not sent a request", "slots", maxConns)
	}
}

// evict closes c's socket, which its goroutine sees on its next read or
// write. c stays counted until that goroutine ends, so that the bound holds
// for goroutines as well as sockets. l.mu must be held.
func (l *connLimiter) evict(c *limitedConn) {
	switch c.state {
	case connWaiting:
		l.waiting.remove(c)
	case connAnswered:
		l.answered.remove(c)
	default:
		return
	}
	c.state = connEvicted
	l.evicted++
	_ = c.Conn.Close()
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
	l.changed.Signal()
}

// release stops counting c, once: its goroutine is ending.
func (l *connLimiter) release(c *limitedConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch c.state {
	case connReleased:
		return
	case connWaiting:
		l.waiting.remove(c)
	case connAnswered:
		l.answered.remove(c)
	case connEvicted:
		l.evicted--
	}
	c.state = connReleased
	l.held--
	// Broadcast, not Signal: Accept and wait may both be waiting.
	l.changed.Broadcast()
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
	l.changed.Broadcast()
}

// connState is the http.Server's ConnState hook. StateClosed is reported by
// a connection's own goroutine as its last act, after it has closed the
// connection and left net/http's bookkeeping, so it is there that a slot is
// freed: the bound then holds for goroutines, not only for sockets, however
// long a busy scheduler takes to run them.
func (l *connLimiter) connState(nc net.Conn, state http.ConnState) {
	if state != http.StateClosed {
		return
	}
	if c, ok := nc.(*limitedConn); ok {
		l.release(c)
	}
}

// wait returns once the goroutine of every accepted connection has ended,
// so that Serve returns only after all of them have.
func (l *connLimiter) wait() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.held > 0 {
		l.changed.Wait()
	}
}

// limitedConn is a connection held by a connLimiter. It watches the bytes
// read for the end of the request header and the first write of the
// answer, which is all the limiter needs to choose whom to evict.
type limitedConn struct {
	net.Conn
	limiter *connLimiter

	// Guarded by limiter.mu.
	state      slotState
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

// Write reports the answer once it is on its way, never before: a
// connection marked answered may be closed at once.
func (c *limitedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if !c.wrote {
		c.wrote = true
		c.limiter.wroteAnswer(c)
	}
	return n, err
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

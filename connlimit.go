package health

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// maxConns is the most connections Serve holds at once, whatever the
// descriptor limit: a goroutine and a few KiB of buffers each, far more than
// a kubelet's one probe at a time needs.
const maxConns = 256

// connLimit is the bound on the connections Serve holds for a process whose
// soft descriptor limit is soft (0 when unknown): a quarter of it, so that
// the probe port can never starve the agent of descriptors, and at most
// maxConns. Below a soft limit of 8 the bound is 1, and a single silent
// client can hold Accept for the header timeout, since the connection
// admitted last is never evicted; no Go process runs on so few.
func connLimit(soft uint64) int {
	if soft == 0 || soft/4 >= maxConns {
		return maxConns
	}
	return max(1, int(soft/4))
}

// descriptorRetry is how long Accept waits before trying again when it has
// run out of descriptors and holds nothing it could close to make room: the
// rest of the process holds them all, and only time frees one.
const descriptorRetry = 10 * time.Millisecond

// slotState is where a held connection stands, which decides whether it
// may be closed to make room.
type slotState uint8

const (
	// slotWaiting: no request read yet. Evictable, oldest first: a probe
	// sends its whole request at once, so the connection that has waited
	// longest without one is the one most likely stalling.
	slotWaiting slotState = iota
	// slotActive: a request has been read (or its bytes were already there
	// at accept) and is being answered, which takes microseconds, because
	// nothing after reading a request waits on the client: the handler
	// never reads a body, and net/http's own reads fail at once
	// (stopReading). Never evicted.
	slotActive
	// slotEvicted: closed by the limiter; counted until its goroutine ends.
	slotEvicted
	// slotReleased: no longer counted.
	slotReleased
)

// connLimiter is the net.Listener Serve gives net/http. It holds at most
// limit connections, each counted until the goroutine serving it has ended,
// so the bound holds for goroutines and memory as well as for sockets. It
// makes room before it accepts, by closing the connection that has waited
// longest without sending a request, never a newcomer and never one being
// answered: a bound that refused newcomers would let a few hundred silent
// clients lock the kubelet out.
//
// Closing the oldest silent connection costs a probe nothing as long as a
// probe's request is there when it is accepted, and is answered at once
// once read. The first is the kernel's job on Linux (setDeferAccept, from
// the first connection on) and the peek's on every Unix (connCalls.peek). The
// second is why Serve disables net/http's own OPTIONS handler, never lets
// net/http read or wait for a body (closeAfterBody, stopReading) and never
// lets it read an oversized header (maxRequestBytes, maxHeaderLines,
// limitHeaderValues): each of those would hold a connection that cannot be
// evicted, or one net/http lingers over (see maxRequestBytes).
type connLimiter struct {
	net.Listener
	log      logFunc
	counters *connCounters
	limit    int
	// reserve is how many slots are kept for connections being answered
	// or closed: eviction starts this far below limit, so that under a
	// flood Accept rarely waits for a goroutine to finish.
	reserve int
	// peek is Accept's scratch buffer for calls.peek, and calls makes
	// Accept's system calls on a new connection. One of each serves
	// because net/http's Server.Serve calls Accept from a single
	// goroutine, in a loop; a caller that called Accept concurrently
	// would need one each.
	peek  []byte
	calls *connCalls
	// short answers plain probes at accept; nil (a test's limiter)
	// answers none.
	short *shortPath
	// quarantine holds, under pressure, connections that arrive empty,
	// until they speak.
	quarantine *quarantine
	// lastEviction is the monotonicNow of this limiter's last eviction,
	// or close of a silent connection in quarantine; 0 before the first.
	// crowded reads it rather than the Server's counter, which Serve
	// calls on other listeners share.
	lastEviction atomic.Int64

	mu            sync.Mutex
	released      sync.Cond    // a held connection was released, or shutdown began
	held          int          // accepted, and their goroutines not yet ended
	evicted       int          // of held, those closed by the limiter
	waiting       connList     // of held, those with no request yet, oldest first
	emptyWaiting  int          // of waiting, those admitted with nothing arrived
	newest        *limitedConn // the connection admitted last
	closing       bool         // Serve is shutting down: no connection is admitted
	floodLog      logGate
	outOfFDLog    logGate
	cannotTellLog logGate
}

func newConnLimiter(ln net.Listener, limit int, counters *connCounters, log logFunc) *connLimiter {
	l := &connLimiter{
		Listener: ln,
		log:      log,
		counters: counters,
		limit:    limit,
		reserve:  limit / 8,
		peek:     make([]byte, maxRequestBytes),
		calls:    newConnCalls(),
	}
	l.released.L = &l.mu
	l.quarantine = newQuarantine(ln, l.countEviction, log)
	counters.limit.Add(int64(limit)) // until Serve returns: see serve
	// A listener that is not a socket (a test's, say) has nothing to set.
	if sc, ok := ln.(syscall.Conn); ok {
		rc, err := sc.SyscallConn()
		if err == nil {
			err = setDeferAccept(rc)
		}
		if err != nil {
			log(context.Background(), slog.LevelWarn, "health: cannot defer accept; silent connections will take connection slots until evicted", "err", err)
		}
	}
	return l
}

// Accept makes room for one more connection, then accepts it, or takes one
// from the quarantine that has spoken since. It waits only while every slot
// is held by connections being answered or closed, which end in
// microseconds. A connection whose request is already a complete plain
// probe is answered and closed here, without a slot (shortPath); one whose
// header is already too large is refused here, and one already closed by
// its client is closed: none of them reaches net/http. It returns one
// connection per call; a quarantined connection that speaks is handed on
// by the first call after the quarantine's next look (see quarantine).
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		if err := l.makeRoom(); err != nil {
			return nil, err
		}
		nc, fresh, err := l.quarantine.next()
		if err == nil {
			if fresh {
				l.counters.accepted.Add(1)
			}
			if nc = l.route(nc, fresh); nc != nil {
				return nc, nil
			}
			continue
		}
		if !isOutOfDescriptors(err) {
			return nil, err
		}
		// Said whether or not anyone waits to be accepted: the agent is
		// at its limit, which its operator needs to know.
		l.warnOutOfDescriptors(&l.outOfFDLog, "health: out of file descriptors; closing the oldest connections that have not sent a request", err)
		queued, pollErr := acceptQueued(l.Listener, quarantineLook)
		if pollErr != nil {
			// A connection may be closed for nobody.
			l.warnOutOfDescriptors(&l.cannotTellLog, "health: out of file descriptors, and cannot tell whether a connection waits; making room as if one did", pollErr)
		}
		if !queued {
			continue // nobody to make room for: see acceptQueued
		}
		// net/http would log this and back off for up to a second,
		// while the kubelet's connection waits in the kernel's queue.
		l.outOfDescriptors()
	}
}

// route deals with a connection by what has arrived on it, and returns it
// admitted for net/http, or nil when it was dealt with here (answered,
// refused, closed or held). fresh is true for a connection straight from
// the listener, false for one from the quarantine, which is never held
// again. makeRoom has made room for one admission.
func (l *connLimiter) route(nc net.Conn, fresh bool) net.Conn {
	switch p, n := l.calls.peek(nc, l.peek); {
	case p == peekedOversized:
		refuse(l.calls, nc)
	case p == peekedClosed:
		_ = nc.Close() // nothing to answer: it never takes a slot
	case p == peekedComplete && l.short != nil && l.short.answer(l.calls, nc, l.peek, n):
		// answered and closed
	case p == peekedEmpty && fresh && l.crowded() && l.quarantine.hold(nc, l.calls.fd, l.quarantineRoom()):
		// held until it speaks
	default:
		return l.admit(nc, p)
	}
	return nil
}

// makeRoom returns once one more connection can be held within the limit.
// It returns net.ErrClosed once Serve is shutting down. It closes and logs
// outside the lock, so that neither a slow log sink nor the wait inside
// Close holds up the ConnState hooks.
func (l *connLimiter) makeRoom() error {
	l.mu.Lock()
	for !l.closing {
		if l.held-l.evicted >= l.limit-l.reserve {
			if victim := l.evictOldest(false); victim != nil {
				logNow := l.floodLog.due(time.Now())
				l.mu.Unlock()
				_ = victim.Conn.Close()
				if logNow {
					l.log(context.Background(), slog.LevelWarn, "health: connection slots full; closing the oldest connections that have not sent a request", "slots", l.limit)
				}
				l.mu.Lock()
				continue
			}
		}
		if l.held < l.limit {
			l.mu.Unlock()
			return nil
		}
		l.released.Wait()
	}
	l.mu.Unlock()
	return net.ErrClosed
}

// admit counts a newly accepted connection, as p, what the peek found,
// then has the quarantine give back a descriptor if the slots have now
// taken one of its share (see descriptorBudget).
func (l *connLimiter) admit(nc net.Conn, p peeked) net.Conn {
	c := &limitedConn{Conn: nc, limiter: l}
	complete := p == peekedComplete
	l.mu.Lock()
	l.held++
	l.newest = c
	l.counters.held.Add(1)
	if complete {
		c.state = slotActive
	} else {
		c.state = slotWaiting
		l.waiting.pushBack(c)
		if c.empty = p == peekedEmpty; c.empty {
			l.emptyWaiting++
		}
	}
	closing := l.closing && !complete
	if closing {
		l.evict(c) // nothing to answer, and it would hold Shutdown
	}
	room := descriptorBudget(l.limit) - l.held
	l.mu.Unlock()
	if closing {
		_ = nc.Close()
	}
	l.quarantine.shrink(room)
	return c
}

// stopWaiting takes c off the list of connections waiting for a request.
// l.mu must be held.
func (l *connLimiter) stopWaiting(c *limitedConn) {
	l.waiting.remove(c)
	if c.empty {
		l.emptyWaiting--
	}
}

// quarantineRoom is how many connections the quarantine may hold beside
// the slots in use, within the descriptor budget they share (see
// descriptorBudget).
func (l *connLimiter) quarantineRoom() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return descriptorBudget(l.limit) - l.held
}

// warnOutOfDescriptors writes msg, a warning of Accept's when accept
// fails for lack of descriptors, through gate, with err and the slots
// held: what an operator sizing the agent's descriptor limit needs.
func (l *connLimiter) warnOutOfDescriptors(gate *logGate, msg string, err error) {
	l.mu.Lock()
	logNow := gate.due(time.Now())
	held := l.held
	l.mu.Unlock()
	if logNow {
		l.log(context.Background(), slog.LevelWarn, msg, "held", held, "err", err)
	}
}

// outOfDescriptors makes room after accept failed for lack of descriptors,
// rather than backing off: it closes the connection held longest in
// quarantine, else the oldest connection without a request, which frees
// its descriptor at once (net.Conn.Close returns once the descriptor is
// closed), or else waits for one being answered to end. Only when Serve
// holds nothing at all is the shortage the rest of the process's, and then
// it waits descriptorRetry.
func (l *connLimiter) outOfDescriptors() {
	if l.quarantine.shrink(0) {
		return
	}
	l.mu.Lock()
	victim := l.evictOldest(true)
	l.mu.Unlock()
	if victim != nil {
		_ = victim.Conn.Close()
		return
	}
	l.mu.Lock()
	if l.closing {
		l.mu.Unlock()
		return
	}
	if held := l.held; held > 0 {
		for l.held >= held && !l.closing {
			l.released.Wait()
		}
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	time.Sleep(descriptorRetry)
}

// evictOldest evicts the connection that has waited longest without a
// request, if there is one, and returns it for the caller to close once
// it has released l.mu. Unless a newcomer is known to be waiting in the
// kernel, it spares the connection admitted last: that one is still the
// newcomer, whose goroutine may not have run yet, and there may be no one
// to make room for. l.mu must be held.
func (l *connLimiter) evictOldest(newcomerWaiting bool) *limitedConn {
	c := l.waiting.front()
	if c == nil || (c == l.newest && !newcomerWaiting) {
		return nil
	}
	l.evict(c)
	l.countEviction()
	return c
}

// countEviction counts a connection closed to make room, in the slots or
// in quarantine: in the Server's counters, for Status, and in the
// limiter's own lastEviction, for crowded.
func (l *connLimiter) countEviction() {
	now := monotonicNow()
	l.counters.evicted.Add(1)
	l.counters.lastEviction.Store(now)
	l.lastEviction.Store(now)
}

// logGate lets a log line through at most once a minute. Clients can
// provoke each of the limiter's lines, and must not write to the agent's
// log at will. The limiter's l.mu guards its gates.
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

// evict marks a waiting connection evicted; the caller closes it, which
// its goroutine sees at once on its read. It stays counted until that
// goroutine ends, so that the bound holds for goroutines as well as
// sockets. Closing returns once the descriptor is closed, which waits for
// that goroutine to be scheduled, hence outside l.mu. l.mu must be held.
func (l *connLimiter) evict(c *limitedConn) {
	l.stopWaiting(c)
	c.state = slotEvicted
	l.evicted++
}

// trackState is the http.Server's ConnState hook.
//
// StateActive is reported once net/http has read a request (or given up
// on one), just before it answers: from then on the connection ends in
// microseconds, so it is no longer evictable. StateClosed is reported by
// the connection's own goroutine as its last act, which is where a slot is
// freed. Serve's handler never hijacks a connection.
func (l *connLimiter) trackState(nc net.Conn, state http.ConnState) {
	c, ok := nc.(*limitedConn)
	if !ok {
		return
	}
	if state == http.StateActive {
		stopReading(c.Conn)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch state {
	case http.StateActive:
		if c.state == slotWaiting {
			l.stopWaiting(c)
			c.state = slotActive
		}
	case http.StateClosed:
		l.release(c)
	}
}

// release stops counting c, once. l.mu must be held.
func (l *connLimiter) release(c *limitedConn) {
	switch c.state {
	case slotReleased:
		return
	case slotWaiting:
		l.stopWaiting(c)
	case slotEvicted:
		l.evicted--
	}
	c.state = slotReleased
	l.held--
	l.counters.held.Add(-1)
	// Broadcast: Accept and wait may both be waiting.
	l.released.Broadcast()
}

// shutdown closes every connection that has not sent a request, those in
// quarantine included, and stops Accept from admitting more: they have
// nothing to answer and would only hold Serve's shutdown until their header
// timeout.
func (l *connLimiter) shutdown() {
	l.mu.Lock()
	l.closing = true
	var victims []*limitedConn
	for c := l.waiting.front(); c != nil; c = l.waiting.front() {
		l.evict(c)
		victims = append(victims, c)
	}
	l.released.Broadcast()
	l.mu.Unlock()
	for _, c := range victims {
		_ = c.Conn.Close()
	}
	l.quarantine.close()
}

// Close closes the listener, which wakes an Accept waiting on it, then
// every connection in quarantine.
func (l *connLimiter) Close() error {
	err := l.Listener.Close()
	l.quarantine.close()
	return err
}

// wait returns once the goroutine of every accepted connection has ended.
func (l *connLimiter) wait() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.held > 0 {
		l.released.Wait()
	}
}

// limitedConn is a connection held by a connLimiter.
type limitedConn struct {
	net.Conn
	limiter *connLimiter

	// Guarded by limiter.mu.
	state slotState
	empty bool // admitted with nothing arrived, and waiting: see crowded
	links[limitedConn]

	// Used by the goroutine reading the connection only (net/http's reads
	// never overlap).
	read    int           // bytes read so far
	header  headerScanner // the request header's lines, as read so far
	refused bool          // the request has been refused as too large
}

// connList is a list of held connections, oldest first.
type connList = list[limitedConn, *limitedConn]

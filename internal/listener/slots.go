package listener

import (
	"log/slog"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"
)

// maxLimit is the most connections net/http holds at once: a goroutine
// and a few KiB of buffers each, far more than a kubelet's one probe at a
// time needs.
const maxLimit = 256

// limitFor is the bound on net/http's slots for a soft descriptor limit of
// soft (0 when unknown): a quarter of it, so that the probe port can never
// starve the agent of descriptors, at least 1 and at most maxLimit.
func limitFor(soft uint64) int {
	if soft == 0 || soft/4 >= maxLimit {
		return maxLimit
	}
	return max(1, int(soft/4))
}

// maxWaiting is the most connections the room holds: each costs a
// descriptor and the kernel's socket and receive buffer
// (docs/performance.md measures them).
const maxWaiting = 4096

// roomSize is the room's size beside limit slots: what is left of three
// quarters of soft, so that a quarter stays the agent's, and at most
// maxWaiting.
func roomSize(soft uint64, limit int) int {
	if soft == 0 || soft > 4*maxWaiting {
		return maxWaiting
	}
	return min(maxWaiting, max(1, int(soft*3/4)-limit))
}

// slotState is where a connection in a slot stands, which decides whether
// it may be closed to make room.
type slotState uint8

const (
	// slotWaiting: no whole request read yet. Evictable, oldest first.
	slotWaiting slotState = iota
	// slotActive: a whole request is being answered, which takes
	// microseconds (guards.go). Never evicted.
	slotActive
	slotEvicted  // closed to make room; counted until its goroutine ends
	slotReleased // no longer counted
)

// connLimiter is the net.Listener Serve gives net/http. It holds at most
// limit connections in net/http's slots, each counted until the goroutine
// serving it has ended, so the bound holds for goroutines and memory as
// well as sockets. When full, it closes the slot that has waited longest
// without a request, never a newcomer and never one being answered: a
// bound that refused newcomers would let a few hundred silent clients
// lock the kubelet out.
type connLimiter struct {
	net.Listener
	log      LogFunc
	counters *Counters
	limit    int
	// reserve is how many slots are kept for connections being answered
	// or closed: eviction starts this far below limit, so that under a
	// flood Accept rarely waits for a goroutine to finish.
	reserve   int
	accepting *reader // the goroutine's that calls the listener's Accept
	room      *room   // nil where there is none, and Accept accepts itself
	// handoff carries what the accepting and the room's goroutines hand
	// to net/http, when there is a room.
	handoff    chan handed
	done       chan struct{} // closed once Serve stops taking connections
	stopOnce   sync.Once
	goroutines sync.WaitGroup // the accepting and the room's goroutines
	acceptEnd  chan struct{}  // closed as the accepting goroutine returns

	mu         sync.Mutex
	released   sync.Cond                       // a slot was released, or shutdown began
	held       int                             // accepted, and their goroutines not yet ended
	evicted    int                             // of held, those closed by the limiter
	waiting    list[limitedConn, *limitedConn] // of held, those with no request yet, oldest first
	newest     *limitedConn                    // the connection admitted last
	closing    bool                            // Serve is shutting down: no connection is admitted
	floodLog   logGate
	outOfFDLog logGate
	pollLog    logGate
}

// handoffQueue is how many connections may be handed on before net/http's
// Accept takes them: under a flood for net/http, the goroutine that calls
// Accept waits its turn behind the connections' own, and unqueued, the
// accepting goroutine, and every probe it would answer, waited with it. A
// queued connection holds a descriptor outside the slots' bound, so the
// queue is at most a quarter of the slots (queueFor).
const handoffQueue = 64

func queueFor(limit int) int { return max(1, min(handoffQueue, limit/4)) }

// handed is a connection and its peek, or the listener's error.
type handed struct {
	nc  net.Conn
	p   peeked
	err error
}

func newConnLimiter(ln net.Listener, limit int, opts Options) *connLimiter {
	l := &connLimiter{
		Listener:  ln,
		log:       opts.Log,
		counters:  opts.Counters,
		limit:     limit,
		reserve:   limit / 8,
		accepting: newReader(opts.Answer),
		done:      make(chan struct{}),
	}
	l.released.L = &l.mu
	opts.Counters.Limit.Add(int64(limit)) // until Serve returns
	if sc, ok := ln.(syscall.Conn); ok {
		rc, err := sc.SyscallConn()
		if err == nil {
			err = setDeferAccept(rc)
		}
		if err != nil {
			l.log(slog.LevelWarn, "health: cannot defer accept; silent clients will be accepted at once", "err", err)
		}
	}
	size := opts.room
	if size == 0 {
		size = roomSize(softDescriptorLimit(), limit+queueFor(limit))
	}
	if size > 0 {
		l.room = newRoom(l, size, opts.Answer)
	}
	if l.room != nil {
		l.handoff = make(chan handed, queueFor(limit))
		l.acceptEnd = make(chan struct{})
		l.goroutines.Add(2)
		go l.acceptLoop()
		go l.room.run()
	}
	return l
}

// Accept returns the next connection for net/http: with a room, what is
// handed on; without one, every connection, peeked at so that one whose
// request is already whole is never evicted before net/http has read it.
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		if err := l.makeRoom(); err != nil {
			return nil, err
		}
		if l.room != nil {
			select {
			case h := <-l.handoff:
				if h.err != nil {
					return nil, h.err
				}
				return l.admit(h.nc, h.p), nil
			case <-l.done:
				return nil, net.ErrClosed
			}
		}
		nc, err := l.Listener.Accept()
		if err != nil {
			if !isOutOfDescriptors(err) {
				return nil, err
			}
			l.outOfDescriptors(err)
			continue
		}
		l.counters.Accepted.Add(1)
		if p, _ := l.accepting.peek(nc); p != peekedClosed {
			return l.admit(nc, p), nil
		}
		_ = nc.Close()
	}
}

// hand gives h to net/http's Accept, and reports false, having closed
// h's connection with r (discard), once Serve takes no more.
func (l *connLimiter) hand(h handed, r *reader) bool {
	select {
	case l.handoff <- h:
		return true
	case <-l.done:
		if h.nc != nil {
			r.discard(h.nc)
			_ = h.nc.Close()
		}
		return false
	}
}

// makeRoom returns once one more connection can be held within the limit,
// or net.ErrClosed once Serve is shutting down. It closes and logs outside
// the lock, not to hold up the ConnState hooks.
func (l *connLimiter) makeRoom() error {
	l.mu.Lock()
	for !l.closing {
		if l.held-l.evicted >= l.limit-l.reserve {
			if victim := l.evictOldest(false); victim != nil {
				logNow := l.floodLog.due(time.Now())
				l.mu.Unlock()
				_ = victim.Conn.Close()
				if logNow {
					l.log(slog.LevelWarn, "health: connection slots full; closing the oldest connections that have not sent a request", "limit", l.limit)
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

// admit counts a connection given to net/http, as p, what the peek found.
func (l *connLimiter) admit(nc net.Conn, p peeked) net.Conn {
	c := &limitedConn{Conn: nc, limiter: l, admitted: MonotonicNow()}
	complete := p == peekedComplete
	l.mu.Lock()
	l.held++
	l.newest = c
	l.counters.Held.Add(1)
	if complete {
		c.state = slotActive
	} else {
		c.state = slotWaiting
		l.waiting.pushBack(c)
	}
	closing := l.closing && !complete
	if closing {
		l.evict(c) // nothing to answer, and it would hold Shutdown
	}
	l.mu.Unlock()
	if closing {
		discardUnread(nc)
		_ = nc.Close()
	}
	return c
}

// evictOldest evicts the slot that has waited longest without a request,
// if there is one, and returns it for the caller to close once it has
// released l.mu. Unless a newcomer is known to be waiting in the kernel,
// it spares the connection admitted last: its goroutine may not have run
// yet, and there may be no one to make room for. l.mu must be held.
func (l *connLimiter) evictOldest(newcomerWaiting bool) *limitedConn {
	c := l.waiting.front()
	if c == nil || (c == l.newest && !newcomerWaiting) {
		return nil
	}
	l.evict(c)
	l.counters.countEviction()
	return c
}

// evict marks a waiting slot evicted, for the caller to close; it stays
// counted until its goroutine ends. l.mu must be held.
func (l *connLimiter) evict(c *limitedConn) {
	l.waiting.remove(c)
	c.state = slotEvicted
	l.evicted++
}

// trackState is the http.Server's ConnState hook. net/http reports
// StateActive once it has read a request (or given up on one), just before
// it answers, and StateClosed from the connection's own goroutine as its
// last act, which frees the slot. Serve's handler never hijacks.
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
			l.waiting.remove(c)
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
		l.waiting.remove(c)
	case slotEvicted:
		l.evicted--
	}
	c.state = slotReleased
	l.held--
	l.counters.Held.Add(-1)
	l.released.Broadcast() // Accept and wait may both be waiting
}

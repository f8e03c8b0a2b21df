package health

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// quarantineGrace is how long, from its accept, a connection held in
// quarantine has to send its first bytes. A kubelet writes its request as
// soon as its handshake completes, a busy one some tens of milliseconds
// later; a client still silent after this is closed.
const quarantineGrace = 100 * time.Millisecond

// quarantineSize is the most connections a quarantine holds for a bound of
// limit slots: twice the slots, so that a probe's late request outlasts a
// few hundred silent arrivals at the default bound. Each costs a
// descriptor and no goroutine; with the slots, Serve holds at most three
// times its bound in descriptors (see Server.Serve).
func quarantineSize(limit int) int { return 2 * limit }

// A quarantine holds, without reading them and without a goroutine each,
// the connections that arrive empty while the slots are under pressure
// (see crowded), until their first bytes arrive or quarantineGrace passes.
// Full, it hands the one held longest to a slot (see hold).
//
// On Linux such a connection exists only when the kernel has completed its
// handshake without TCP_DEFER_ACCEPT's wait: a SYN cookie, once silent
// clients fill the SYN queue, or a deferral run out. A probe whose request
// comes a few tens of milliseconds after its handshake (a busy kubelet) is
// then accepted empty. Admitted into the slots at once, it would wait in
// the limiter's list, and a flood's reconnecting clients would push a
// bound's worth of newer admissions past it within milliseconds: it would
// be evicted before it speaks. Held here instead, it is admitted once its
// request has arrived, as one that is being answered and that no
// eviction touches. Silent clients held here cost no slot; they are closed
// when their grace runs out with nothing arrived, or, the quarantine full,
// the oldest moves to a slot, where it waits for its request with its own
// goroutine and is evicted, oldest first, like any other.
//
// Two simpler designs were tried under the same SYN-cookie flood and are
// worse: sparing connections younger than some age from eviction, and not
// accepting while the quarantine is full. Both stop Accept from taking connections
// at the kernel's pace, so its accept queue overflows and drops the
// handshakes of probes with the rest.
//
// Accept is the quarantine's only clock: the readiness poller (one epoll
// set per Serve on Linux, none elsewhere) watches the held connections and
// the listener together, and Accept waits on it while anything is held, so
// that a held connection's first bytes, a new connection and the earliest
// grace to run out all wake the same wait. Serve starts no goroutine for
// it, and a held connection that speaks reaches net/http through the next
// Accept, which hands out one connection per call.
type quarantine struct {
	ln     net.Listener
	poller *readinessPoller // nil where descriptors cannot be watched: nothing is held
	size   int
	grace  time.Duration
	// countEviction counts a connection closed unspoken, as the limiter
	// counts its evictions.
	countEviction func()
	log           logFunc

	mu         sync.Mutex
	silent     heldList            // held, no bytes seen yet, oldest first
	byFD       map[int32]*heldConn // silent, by descriptor: what the poller reports
	ready      []*heldConn         // spoke, or their peer went: Accept hands them on in order
	listenerFD int32               // the listener's descriptor, while the poller watches it (-1: not watched)
	closed     bool                // Serve is stopping: nothing more is held
	failed     bool                // the poller failed: nothing more is held
	expired    []*heldConn         // expire's scratch
}

// heldConn is a connection in quarantine.
type heldConn struct {
	nc       net.Conn
	fd       int32
	deadline time.Time // its accept plus the grace
	links[heldConn]
}

// heldList is a list of held connections, oldest first.
type heldList = list[heldConn, *heldConn]

// newQuarantine returns the quarantine of a connLimiter on ln. Where
// descriptors cannot be watched (outside Linux), or ln is not a
// *net.TCPListener itself, it holds nothing, and Accept admits empty
// connections as it admits any other.
//
// Only a *net.TCPListener promises what next relies on: that once the
// poller reports the listener readable, its Accept returns at once. A
// wrapper's Accept may wait (for a token, a handshake, another
// acceptor's turn), and the connections that spoke meanwhile would wait
// with it, past their client's timeout. So the type is checked exactly: a
// wrapper that embeds one does not qualify.
func newQuarantine(ln net.Listener, limit int, countEviction func(), log logFunc) *quarantine {
	q := &quarantine{ln: ln, size: quarantineSize(limit), grace: quarantineGrace, countEviction: countEviction, log: log, listenerFD: -1}
	if _, ok := ln.(*net.TCPListener); !ok {
		return q
	}
	p, err := newReadinessPoller()
	if err != nil {
		if !errors.Is(err, errors.ErrUnsupported) {
			log(context.Background(), slog.LevelWarn, "health: cannot watch connections that arrive empty; under a flood, a probe that writes late may be evicted before it speaks", "err", err)
		}
		return q
	}
	q.poller = p
	q.byFD = make(map[int32]*heldConn)
	return q
}

// hold takes nc, a connection that arrived empty, and returns the one
// Accept is to admit to a slot instead, if any: nc itself when it cannot
// be held (no poller, Serve stopping, no descriptor to watch), nil when it
// is held, or, when the quarantine is full, the connection held longest,
// which makes room for it. That one goes on rather than being closed, so
// that the slots' own eviction, oldest first, takes over: the connections
// in slots waiting for a request are older still, and under a flood a
// probe's late request then has the slots and the quarantine together,
// not the quarantine alone, to arrive in. Its request may have arrived
// since the poller last reported, so Accept peeks at it as at a newcomer
// (see connLimiter.route).
func (q *quarantine) hold(nc net.Conn) net.Conn {
	if q.poller == nil {
		return nc
	}
	fd, ok := descriptorOf(nc)
	if !ok {
		return nc
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed || q.failed {
		return nc
	}
	var oldest *heldConn
	if q.silent.len+len(q.ready) >= q.size {
		if oldest = q.silent.front(); oldest == nil {
			return nc // all of them have spoken, and Accept hands those on first
		}
	}
	if err := q.poller.watch(fd); err != nil {
		return nc
	}
	c := &heldConn{nc: nc, fd: fd, deadline: time.Now().Add(q.grace)}
	q.silent.pushBack(c)
	q.byFD[fd] = c
	q.watchListener()
	if oldest == nil {
		return nil
	}
	q.drop(oldest)
	return oldest.nc
}

// next returns the connection Accept considers next: one held here that
// has spoken, or whose peer has gone, else the listener's next, which is
// fresh. While it holds silent connections, it waits for whichever comes
// first, a held connection's bytes or a new connection, and closes on its
// way those whose grace has run out with nothing arrived (see settle);
// otherwise it waits in the listener's Accept alone. It returns
// net.ErrClosed once the quarantine is closed and has nothing left to
// hand on.
//
// It assumes that once the poller reports the listener readable, its
// Accept returns at once: true of a *net.TCPListener, the only kind
// newQuarantine holds anything for, whose only acceptor is Serve.
func (q *quarantine) next() (nc net.Conn, fresh bool, err error) {
	for q.poller != nil {
		q.mu.Lock()
		if len(q.ready) > 0 {
			c := q.ready[0]
			q.ready[0] = nil
			q.ready = q.ready[1:]
			q.mu.Unlock()
			return c.nc, false, nil
		}
		if q.closed {
			q.mu.Unlock()
			return nil, false, net.ErrClosed
		}
		oldest := q.silent.front()
		q.mu.Unlock()
		if oldest == nil {
			break
		}
		fds, werr := q.poller.wait(oldest.deadline)
		listenerReady := q.collect(fds)
		q.expire(time.Now())
		if werr != nil && !errors.Is(werr, os.ErrDeadlineExceeded) && !q.isClosed() {
			q.fail(werr)
		}
		if listenerReady && !q.anyReady() {
			break
		}
	}
	nc, err = q.ln.Accept()
	return nc, true, err
}

// collect moves the held connections the poller reported to the ready
// list, stops watching them (net/http's own poller takes over), and
// reports whether the listener was among the descriptors. Only Accept's
// goroutine adds to the poller and waits on it, so a descriptor it
// reports is one held here, the listener, or one closed meanwhile by
// shutdown, which is no longer in byFD.
func (q *quarantine) collect(fds []int32) (listenerReady bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, fd := range fds {
		if fd == q.listenerFD {
			listenerReady = true
			continue
		}
		c, ok := q.byFD[fd]
		if !ok {
			continue
		}
		q.drop(c)
		q.ready = append(q.ready, c)
	}
	q.watchListener()
	return listenerReady
}

// expire lets go of the silent connections whose grace ran out by now:
// see settle.
func (q *quarantine) expire(now time.Time) {
	q.mu.Lock()
	expired := q.expired[:0]
	for c := q.silent.front(); c != nil && !c.deadline.After(now); c = q.silent.front() {
		q.drop(c)
		expired = append(expired, c)
	}
	q.watchListener()
	q.expired = expired
	q.mu.Unlock()
	for i, c := range expired {
		q.settle(c)
		expired[i] = nil
	}
}

// closeOldest lets go of the silent connection held longest, if any, and
// reports whether it did: the first descriptor to give back when accept
// runs out of them. Like expire, it closes the connection only if it is
// still empty (see settle); one that has spoken is handed on instead, and
// Accept admits it next.
func (q *quarantine) closeOldest() bool {
	q.mu.Lock()
	c := q.silent.front()
	if c != nil {
		q.drop(c)
		q.watchListener()
	}
	q.mu.Unlock()
	if c == nil {
		return false
	}
	q.settle(c)
	return true
}

// drop stops holding a silent connection, and watching it: an epoll set
// forgets a socket on its close only once every reference to it has gone,
// and a child between fork and exec (an agent runs ip, wg, iptables) holds
// one. Its registration would outlive the close, and its next event would
// be taken for the connection held next under the same descriptor number.
// q.mu must be held.
func (q *quarantine) drop(c *heldConn) {
	q.silent.remove(c)
	delete(q.byFD, c.fd)
	_ = q.poller.unwatch(c.fd)
}

// settle decides a silent connection dropped once its grace ran out, or to
// free its descriptor: one on which anything has arrived (bytes, a FIN, a
// reset) is handed on, for Accept's peek to decide, and only one still
// empty is closed unspoken. The poller's event may not have been
// collected yet: the runtime's timer can beat it, and Accept's goroutine
// can be late past the deadline (a stall, CFS throttling), and a probe
// whose request waits in the receive queue must not be closed for that.
func (q *quarantine) settle(c *heldConn) {
	if !spoke(c.nc) {
		q.closeUnspoken(c)
		return
	}
	q.mu.Lock()
	stopping := q.closed || q.failed // release has run, or is about to, without it
	if !stopping {
		q.ready = append(q.ready, c)
	}
	q.mu.Unlock()
	if stopping {
		_ = c.nc.Close()
	}
}

// closeUnspoken closes a connection that never spoke. It counts as evicted:
// like an eviction, it is the server closing a silent client for want of
// room, a flood's signature.
func (q *quarantine) closeUnspoken(c *heldConn) {
	_ = c.nc.Close()
	q.countEviction()
}

// watchListener has the poller watch the listener while anything is
// silent, which is when Accept waits on the poller, and not otherwise, so
// that an empty quarantine costs nothing per connection. The descriptor is
// looked up each time: once the listener is closed, its number may belong
// to another file. q.mu must be held.
func (q *quarantine) watchListener() {
	want := q.silent.len > 0 && !q.closed && !q.failed
	if want == (q.listenerFD >= 0) {
		return
	}
	fd, ok := descriptorOf(q.ln)
	if !ok {
		return
	}
	if !want {
		_ = q.poller.unwatch(fd)
		q.listenerFD = -1
	} else if q.poller.watchListener(fd) == nil {
		q.listenerFD = fd
	}
}

func (q *quarantine) anyReady() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.ready) > 0
}

func (q *quarantine) isClosed() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.closed
}

// fail gives up holding after the poller failed, which no client can make
// it do: the connections held are closed, and Accept admits empty
// connections as it would without a quarantine. It logs once.
func (q *quarantine) fail(err error) {
	q.mu.Lock()
	first := !q.failed
	q.failed = true
	q.mu.Unlock()
	q.release()
	if first {
		q.log(context.Background(), slog.LevelError, "health: stopped watching connections that arrive empty; under a flood, a probe that writes late may be evicted before it speaks", "err", err)
	}
}

// close closes every connection held, spoken or not, and the poller, which
// wakes an Accept waiting on it: Serve is stopping, and a connection that
// has not reached net/http by now will not be answered.
func (q *quarantine) close() {
	if q.poller == nil {
		return
	}
	q.mu.Lock()
	alreadyClosed := q.closed
	q.closed = true
	q.mu.Unlock()
	q.release()
	if !alreadyClosed {
		_ = q.poller.close()
	}
}

// release closes every connection held. Unlike closeUnspoken, it counts
// nothing: Serve is stopping, or the poller failed, not a flood.
func (q *quarantine) release() {
	q.mu.Lock()
	var silent []*heldConn
	for c := q.silent.front(); c != nil; c = q.silent.front() {
		q.drop(c)
		silent = append(silent, c)
	}
	spoken := q.ready
	q.ready = nil
	q.watchListener()
	q.mu.Unlock()
	for _, c := range append(silent, spoken...) {
		_ = c.nc.Close()
	}
}

// descriptorOf returns the descriptor behind a connection or a listener,
// if it has one.
func descriptorOf(v any) (int32, bool) {
	sc, ok := v.(syscall.Conn)
	if !ok {
		return 0, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, false
	}
	fd := -1
	if rc.Control(func(s uintptr) { fd = int(s) }) != nil || fd < 0 {
		return 0, false
	}
	return int32(fd), true
}

// crowded reports whether the slots are under pressure, which is when an
// empty newcomer goes to the quarantine rather than to a slot: when
// admitting it would fill the slots to where Accept evicts (limit less the
// reserve, counting connections not yet evicted), or when anything was
// evicted, or closed unspoken in quarantine, within the last grace. Under
// a flood every new admission evicts the oldest connection without a
// request, a bound's worth of them passes an empty newcomer within
// milliseconds, and the count of slots in use swings around the threshold
// as evicted clients reconnect: the recent eviction says so when the count
// does not. Otherwise a connection admitted empty waits for its request in
// a slot as it always has, read by its own goroutine the moment the bytes
// arrive. Both are this limiter's own: a flood on another listener of the
// same Server leaves this one's newcomers alone, as it leaves its slots.
func (l *connLimiter) crowded() bool {
	if last := l.lastEviction.Load(); last != 0 && time.Duration(monotonicNow()-last) < l.quarantine.grace {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held-l.evicted+1 >= l.limit-l.reserve
}

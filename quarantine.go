package health

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"
)

// quarantineGrace is how long, from its accept, a connection held in
// quarantine has to send its first bytes. A kubelet writes its request as
// soon as its handshake completes, a busy one some tens of milliseconds
// later; a client still silent after this is closed.
const quarantineGrace = 100 * time.Millisecond

// quarantineLook is how often Accept looks at the connections held while
// it waits for the listener: a held connection that speaks waits up to
// this long for Accept to hand it on, and a silent one may be held this
// much past its grace.
const quarantineLook = 5 * time.Millisecond

// pollerBatch is how many events one poll takes; look polls again while a
// batch comes back full.
const pollerBatch = 64

// descriptorBudget is how many connections Serve holds at once for a
// bound of limit slots, in the slots and in quarantine together: three
// times the slots, so that under a flood of silent connections a probe's
// late request outlasts a few hundred silent arrivals at the default
// bound. The quarantine may use whatever the slots do not (see
// connLimiter.quarantineRoom): a connection held there costs a descriptor
// and no goroutine, one moved to a slot to wait would cost a goroutine and
// net/http's buffers, some 17 KiB, for a client that has sent nothing.
func descriptorBudget(limit int) int { return 3 * limit }

// A quarantine holds, without reading them and without a goroutine each,
// the connections that arrive empty while the slots are under pressure
// (see crowded), until their first bytes arrive or quarantineGrace passes.
// Full, it lets go of the one held longest (see shrink).
//
// On Linux such a connection exists only when the kernel has completed its
// handshake without TCP_DEFER_ACCEPT's wait: a SYN cookie, once silent
// clients fill the SYN queue, or a deferral run out (deferAcceptTimeout). A
// probe whose request comes a few tens of milliseconds after its handshake
// (a busy kubelet) is then accepted empty. Admitted into the slots at once,
// it would wait in the limiter's list, and a flood's reconnecting clients
// would push a bound's worth of newer admissions past it within
// milliseconds: it would be evicted before it speaks. Held here instead, it
// is admitted once its request has arrived, as one that is being answered
// and that no eviction touches. Silent clients held here cost no slot and
// no goroutine; they are closed when their grace runs out with nothing
// arrived, or, the quarantine full, oldest first.
//
// Two simpler designs were tried under the same SYN-cookie flood and are
// worse: sparing connections younger than some age from eviction, and not
// accepting while the quarantine is full. Both stop Accept from taking
// connections at the kernel's pace, so its accept queue overflows and
// drops the handshakes of probes with the rest.
//
// Accept is the quarantine's only clock, and it looks rather than waits.
// While anything is held, the listener's Accept has a deadline at most
// quarantineLook ahead, and each time Accept comes round after that, one
// look at the readiness poller (one epoll set per Serve on Linux, none
// elsewhere) hands on the held connections that spoke and closes those
// whose grace has run out. Under a flood Accept comes round every few
// microseconds, and waiting on the poller and the listener together for
// each connection costs a system call and a deadline apiece, a few
// percent of the server's CPU; a look every quarantineLook costs one call
// a period, and a held connection that speaks waits at most that long
// longer for its slot.
// Serve starts no goroutine for the quarantine, and a held connection that
// spoke reaches net/http through the next Accept, which hands out one
// connection per call.
type quarantine struct {
	ln     net.Listener
	tcp    *net.TCPListener // ln, when the poller exists: its Accept takes a deadline
	poller *readinessPoller // nil where descriptors cannot be watched: nothing is held
	grace  time.Duration
	// countEviction counts a connection closed unspoken, as the limiter
	// counts its evictions.
	countEviction func()
	log           logFunc

	mu      sync.Mutex
	silent  heldList             // held, no bytes seen yet, oldest first
	byID    map[uint64]*heldConn // silent, by the id the poller reports
	lastID  uint64               // the id of the connection held last
	ready   []*heldConn          // spoke, or their peer went: Accept hands them on in order
	closed  bool                 // Serve is stopping: nothing more is held
	failed  bool                 // the poller failed: nothing more is held
	expired []*heldConn          // expire's scratch

	// Accept's goroutine alone uses these: see next.
	nextLook       time.Time // when Accept next looks at what is held
	acceptDeadline time.Time // the deadline set on the listener's Accept; zero: none
}

// heldConn is a connection in quarantine.
type heldConn struct {
	nc       net.Conn
	id       uint64    // what the poller reports it by: see drop
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
// Only a *net.TCPListener promises what next relies on: that its Accept
// returns by the deadline set on it. A wrapper's Accept may wait past it
// (for a token, a handshake, another acceptor's turn), and the connections
// that spoke meanwhile would wait with it, past their client's timeout. So
// the type is checked exactly: a wrapper that embeds one does not qualify.
// Serve owns the listener it is given, and next sets and clears its
// deadline as it needs.
func newQuarantine(ln net.Listener, countEviction func(), log logFunc) *quarantine {
	q := &quarantine{ln: ln, grace: quarantineGrace, countEviction: countEviction, log: log}
	tcp, ok := ln.(*net.TCPListener)
	if !ok {
		return q
	}
	p, err := newReadinessPoller()
	if err != nil {
		if !errors.Is(err, errors.ErrUnsupported) {
			log(context.Background(), slog.LevelWarn, "health: cannot watch connections that arrive empty; under a flood, a probe that writes late may be evicted before it speaks", "err", err)
		}
		return q
	}
	q.tcp, q.poller = tcp, p
	q.byID = make(map[uint64]*heldConn)
	return q
}

// hold takes nc, a connection that arrived empty, and reports whether it
// holds it; it does not when it cannot (no poller, Serve stopping, no
// descriptor to watch), and Accept admits nc to a slot instead. room is
// how many connections it may hold, nc included (see
// connLimiter.quarantineRoom); holding more, it lets go of the one held
// longest (see shrink), before anyone can see it hold more.
//
// fd is nc's descriptor, as the peek found it; -1 if it has none.
func (q *quarantine) hold(nc net.Conn, fd int32, room int) bool {
	if q.poller == nil || fd < 0 {
		return false
	}
	q.mu.Lock()
	if q.closed || q.failed {
		q.mu.Unlock()
		return false
	}
	q.lastID++
	if err := q.poller.watch(fd, q.lastID); err != nil {
		q.mu.Unlock()
		return false
	}
	c := &heldConn{nc: nc, id: q.lastID, deadline: time.Now().Add(q.grace)}
	q.silent.pushBack(c)
	q.byID[c.id] = c
	over := q.overflow(room)
	q.mu.Unlock()
	if over != nil {
		q.settle(over)
	}
	return true
}

// shrink lets go of the connection held longest when the quarantine holds
// more than room, as when the slots have taken one more of the descriptors
// they share with it (hold does the same for a newcomer, under its own
// lock; see overflow): if anything has arrived on it since Accept last
// looked, it is handed on, for Accept's peek to decide; if not, it is
// closed unspoken (see settle). It is not moved to a slot to wait on,
// which would cost a goroutine and buffers for a client that has sent
// nothing. One at a time: each call follows one connection held or
// admitted, so the two together stay within the budget, but for one
// handed on and not yet admitted. It reports whether it let one go:
// shrink(0) does whenever anything silent is held, which makes it the
// first descriptor to give back when accept runs out of them.
func (q *quarantine) shrink(room int) bool {
	q.mu.Lock()
	over := q.overflow(room)
	q.mu.Unlock()
	if over == nil {
		return false
	}
	q.settle(over)
	return true
}

// overflow drops the connection held longest and returns it, for settle,
// when the quarantine holds more than room; nil when it does not. hold
// calls it under the lock that adds the newcomer, so that no one ever sees
// the quarantine hold more than room. q.mu must be held.
func (q *quarantine) overflow(room int) *heldConn {
	oldest := q.silent.front()
	if oldest == nil || q.silent.len+len(q.ready) <= room {
		return nil
	}
	q.drop(oldest)
	return oldest
}

// next returns the connection Accept considers next: one held here that
// has spoken, or whose peer has gone, else the listener's next, which is
// fresh. While it holds silent connections, it gives the listener's
// Accept a deadline of the next look, and looks (see look) whenever
// Accept comes round after it; otherwise the listener's Accept waits
// without a deadline. It returns net.ErrClosed once the quarantine is
// closed and has nothing left to hand on.
func (q *quarantine) next() (nc net.Conn, fresh bool, err error) {
	if q.poller == nil {
		nc, err = q.ln.Accept()
		return nc, true, err
	}
	for {
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
		holding := q.silent.len > 0
		q.mu.Unlock()
		var deadline time.Time
		if holding {
			if now := time.Now(); !now.Before(q.nextLook) {
				q.look(now)
				continue
			}
			deadline = q.nextLook
		}
		if !deadline.Equal(q.acceptDeadline) && q.tcp.SetDeadline(deadline) == nil {
			q.acceptDeadline = deadline
		}
		nc, err = q.ln.Accept()
		if err != nil && !q.acceptDeadline.IsZero() && errors.Is(err, os.ErrDeadlineExceeded) {
			continue // time to look
		}
		return nc, true, err
	}
}

// look hands on the held connections whose first bytes, FIN or reset the
// poller reports, then closes those whose grace ran out by now with
// nothing reported. now is read before the poller is asked, so a
// connection whose bytes arrived within its grace is among those
// reported: none of them is closed for a late look (Accept's goroutine
// stalled, or CFS throttled it).
func (q *quarantine) look(now time.Time) {
	q.nextLook = now.Add(quarantineLook)
	for {
		ids, err := q.poller.poll()
		if err != nil {
			if !q.isClosed() {
				q.fail(err)
			}
			return
		}
		q.collect(ids)
		if len(ids) < pollerBatch {
			break
		}
	}
	q.expire(now)
}

// collect moves the held connections the poller reported to the ready
// list. An id it reports that is no longer held is one dropped since (see
// drop).
func (q *quarantine) collect(ids []uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, id := range ids {
		c, ok := q.byID[id]
		if !ok {
			continue
		}
		q.drop(c)
		q.ready = append(q.ready, c)
	}
}

// expire closes the silent connections whose grace ran out by now, and
// counts them as evicted: see look, which collects what spoke first.
func (q *quarantine) expire(now time.Time) {
	q.mu.Lock()
	expired := q.expired[:0]
	for c := q.silent.front(); c != nil && !c.deadline.After(now); c = q.silent.front() {
		q.drop(c)
		expired = append(expired, c)
	}
	q.expired = expired
	q.mu.Unlock()
	for i, c := range expired {
		q.closeUnspoken(c)
		expired[i] = nil
	}
}

// drop stops holding a silent connection. It stays in the poller's set,
// to be forgotten when its socket closes, as the kernel does for a socket
// whose every reference has gone: removing it would cost a system call
// per connection. The poller reports it at most once more (one-shot), by
// its id, which is never held again: that event is ignored, even where a
// child between fork and exec (an agent runs ip, wg, iptables) keeps the
// socket open past its close and its descriptor number is reused for the
// connection held next. q.mu must be held.
func (q *quarantine) drop(c *heldConn) {
	q.silent.remove(c)
	delete(q.byID, c.id)
}

// settle decides a silent connection dropped before its grace ran out, to
// free its descriptor: one on which anything has arrived (bytes, a FIN, a
// reset) since Accept last looked is handed on, for Accept's peek to
// decide, and only one still empty is closed unspoken. Once Serve is
// stopping, either is just closed.
func (q *quarantine) settle(c *heldConn) {
	spoken := spoke(c.nc)
	q.mu.Lock()
	stopping := q.closed || q.failed // release has run, or is about to, without it
	if spoken && !stopping {
		q.ready = append(q.ready, c)
	}
	q.mu.Unlock()
	switch {
	case stopping:
		_ = c.nc.Close() // Serve stopping, not making room: counted as nothing
	case !spoken:
		q.closeUnspoken(c)
	}
}

// closeUnspoken closes a connection that never spoke. It counts as evicted:
// like an eviction, it is the server closing a silent client for want of
// room, a flood's signature.
func (q *quarantine) closeUnspoken(c *heldConn) {
	q.countEviction() // first, so that a client that sees its close finds it counted
	_ = c.nc.Close()
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

// close closes every connection held, spoken or not, and the poller: Serve
// is stopping, and a connection that has not reached net/http by now will
// not be answered. An Accept waiting on the listener returns by its
// deadline, or when Serve closes the listener, whichever is first.
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
	q.mu.Unlock()
	for _, c := range append(silent, spoken...) {
		_ = c.nc.Close()
	}
}

// crowded reports whether the slots are under pressure, which is when an
// empty newcomer goes to the quarantine rather than to a slot: when
// admitting it would fill the slots to where Accept evicts (limit less the
// reserve, counting connections not yet evicted), or when a quarter of the
// slots already wait for a request that has not begun to arrive, or when
// anything was evicted, or closed unspoken in quarantine, within the last
// grace. Under a flood every new admission evicts the oldest connection
// without a request, a bound's worth of them passes an empty newcomer
// within milliseconds, and the count of slots in use swings around the
// threshold as evicted clients reconnect: the recent eviction says so when
// the count does not. A kubelet holds one connection at a time, so a
// quarter of the slots held by empty connections is a crowd: a burst of
// clients whose requests lag their handshakes, each of which would cost a
// goroutine and net/http's buffers in a slot, and a descriptor in
// quarantine. Otherwise a connection admitted empty waits for its request
// in a slot as it always has, with the whole header timeout to send it,
// read by its own goroutine the moment the bytes arrive; slow clients that
// had begun their requests when admitted do not count, so they cannot
// shorten a probe's wait to the quarantine's grace. Both are this limiter's
// own: a flood on another listener of the same Server leaves this one's
// newcomers alone, as it leaves its slots.
func (l *connLimiter) crowded() bool {
	if last := l.lastEviction.Load(); last != 0 && time.Duration(monotonicNow()-last) < l.quarantine.grace {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held-l.evicted+1 >= l.limit-l.reserve || l.emptyWaiting >= max(1, l.limit/4)
}

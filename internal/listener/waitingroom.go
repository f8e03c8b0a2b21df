package listener

import (
	"errors"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"
)

// maxWaiting is the most connections the waiting room holds, whatever the
// descriptor limit: each costs a descriptor and the kernel's socket and
// receive buffer (docs/performance.md measures them), never a goroutine.
const maxWaiting = 4096

// roomSize is how many connections may wait for a whole header beside
// limit slots, for a soft descriptor limit of soft (0 when unknown): what
// is left of three quarters of soft, so that a quarter stays the agent's,
// and at most maxWaiting.
func roomSize(soft uint64, limit int) int {
	if soft == 0 || soft > 4*maxWaiting {
		return maxWaiting
	}
	return min(maxWaiting, max(1, int(soft*3/4)-limit))
}

// A room holds the accepted connections whose request header has not
// arrived whole, without a goroutine or a buffer each: their bytes stay
// in the kernel's receive buffer, and an edge-triggered epoll set of the
// room's own (poller) reports each arrival, on which the room's goroutine
// peeks again. A connection leaves once its header is whole (answered by
// the short path or handed to net/http), once its client has gone, once
// headerTimeout has passed since its accept (closed, as net/http's
// ReadHeaderTimeout would), or, when the room is full and one more
// arrives, when it has waited longest (closed: an eviction).
type room struct {
	l      *connLimiter
	poller *poller
	size   int
	reader *reader // the room's goroutine's

	mu      sync.Mutex
	waiting waiterList         // oldest first, which is deadline order
	byID    map[uint64]*waiter // waiting, by the id the poller reports
	lastID  uint64             // ids are never reused: see drop
	armed   int64              // the poller's deadline; 0 for none
	closed  bool               // Serve stopping, or the poller failed: nothing waits
	fullLog logGate
	expired []*waiter // expire's scratch
}

// waiter is a connection in the room.
type waiter struct {
	nc       net.Conn
	fd       int32
	id       uint64
	deadline int64 // MonotonicNow at accept, plus headerTimeout
	links[waiter]
}

type waiterList = list[waiter, *waiter]

// makePoller is newPoller, but where a test makes it fail.
var makePoller = newPoller

// newRoom returns l's waiting room of size, or nil where none can be
// made: outside Linux quietly, on Linux with a warning, and l's slots then
// hold what waits, evicted under a flood.
func newRoom(l *connLimiter, size int, answer AnswerFunc) *room {
	p, err := makePoller()
	if err != nil {
		if !errors.Is(err, errors.ErrUnsupported) {
			l.log(slog.LevelWarn, "health: cannot make the waiting room; connections without a whole request will wait in connection slots, evicted under a flood", "err", err)
		}
		return nil
	}
	return &room{l: l, poller: p, size: size, reader: newReader(answer), byID: make(map[uint64]*waiter)}
}

// acceptLoop is the goroutine that accepts when there is a room: what the
// peek settles it settles (reader.settle), what has no whole header waits
// in the room, and the rest, with the listener's errors, goes to
// net/http's Accept.
func (l *connLimiter) acceptLoop() {
	defer l.goroutines.Done()
	r := l.accepting
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			if isOutOfDescriptors(err) {
				l.outOfDescriptors(err)
				continue
			}
			// net/http decides whether the error is fatal, and closes
			// the listener if it is, which ends the hand-off.
			if !l.hand(handed{err: err}) {
				return
			}
			continue
		}
		l.counters.Accepted.Add(1)
		p, n := r.peek(nc)
		if r.settle(nc, p, n) || p != peekedComplete && l.room.add(nc, r.calls.fd) {
			continue
		}
		if !l.hand(handed{nc: nc, p: p}) {
			return
		}
	}
}

// add has nc, accepted with its header not whole, wait, and reports
// whether it does; it does not when nc has no descriptor to watch or the
// room is closed. Full, the room closes the connection that has waited
// longest to make room.
func (r *room) add(nc net.Conn, fd int32) bool {
	if fd < 0 {
		return false
	}
	deadline := MonotonicNow() + int64(headerTimeout)
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return false
	}
	r.lastID++
	if err := r.poller.watch(fd, r.lastID); err != nil {
		r.mu.Unlock()
		return false
	}
	var victim *waiter
	if r.waiting.len >= r.size {
		victim = r.waiting.front()
		r.drop(victim)
	}
	w := &waiter{nc: nc, fd: fd, id: r.lastID, deadline: deadline}
	r.waiting.pushBack(w)
	r.byID[w.id] = w
	if r.armed == 0 {
		r.arm(w.deadline)
	}
	logNow := victim != nil && r.fullLog.due(time.Now())
	r.mu.Unlock()
	if victim != nil {
		r.l.counters.countEviction() // first, so a client that sees the close finds it counted
		_ = victim.nc.Close()
		if logNow {
			r.l.log(slog.LevelWarn, "health: waiting room full; closing the connections that have waited longest for a whole request", "waiting", r.size)
		}
	}
	return true
}

// run is the room's goroutine: it waits for the poller to report
// arrivals, or for the oldest deadline, and deals with each.
func (r *room) run() {
	defer r.l.goroutines.Done()
	for {
		ready, err := r.poller.wait()
		if r.isClosed() {
			return
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// Spent: expire arms it anew, even for the same deadline.
			r.mu.Lock()
			r.armed = 0
			r.mu.Unlock()
		} else if err != nil {
			r.fail(err)
			return
		}
		for _, ev := range ready {
			r.examine(ev)
		}
		r.expire()
	}
}

// examine peeks again at the connection ev reports, and lets it go once
// its header is whole, its header is too large or its client has gone.
// A reset one is closed unpeeked: its receive queue may still hold part
// of a header, but no one is left to answer. One whose client shut its
// sending side after part of a header goes to net/http, which answers it
// as it would. The peek is made
// outside the lock; a connection evicted meanwhile is its evicter's.
func (r *room) examine(ev readyEvent) {
	r.mu.Lock()
	w := r.byID[ev.id]
	r.mu.Unlock()
	if w == nil {
		return // dropped since: see drop
	}
	p, n := peekedClosed, 0
	if !ev.failed {
		p, n = r.reader.peek(w.nc)
	}
	stays := (p == peekedEmpty || p == peekedIncomplete) && !ev.hangup
	r.mu.Lock()
	if stays || r.byID[ev.id] != w {
		r.mu.Unlock()
		return
	}
	r.drop(w)
	r.mu.Unlock()
	if r.reader.settle(w.nc, p, n) {
		return
	}
	r.poller.unwatch(w.fd) // net/http reads it from now on
	if ev.hangup && p == peekedIncomplete {
		// Its client has sent all it will: net/http answers it at once
		// (a 400 for a partial header), so it takes an answering slot,
		// never a waiting one that a burst of them would have evicted.
		p = peekedComplete
	}
	r.l.hand(handed{nc: w.nc, p: p})
}

// expire closes the connections whose header timeout has passed, which
// is no eviction, and arms the poller for the next deadline.
func (r *room) expire() {
	now := MonotonicNow()
	r.mu.Lock()
	expired := r.expired[:0]
	for w := r.waiting.front(); w != nil && w.deadline <= now; w = r.waiting.front() {
		r.drop(w)
		expired = append(expired, w)
	}
	var next int64
	if w := r.waiting.front(); w != nil {
		next = w.deadline
	}
	r.arm(next)
	r.expired = expired
	r.mu.Unlock()
	for i, w := range expired {
		r.reader.discard(w.nc) // a clean close, as net/http's
		_ = w.nc.Close()
		expired[i] = nil
	}
}

// arm sets the poller's deadline to deadline (0: none), if it is not set
// already. Under r.mu, so that add's arming and expire's never cross.
func (r *room) arm(deadline int64) {
	if deadline != r.armed {
		r.poller.setDeadline(deadline)
		r.armed = deadline
	}
}

// drop stops holding w. It stays in the poller's set until its socket
// closes, as the kernel removes a socket whose every reference has gone:
// removing it would cost a system call a connection. The poller may
// report it once more, by an id that is never used again, so the report
// is ignored, even where a child between fork and exec (an agent runs ip,
// wg, iptables) keeps the socket open and its descriptor number is reused
// for a newer connection. r.mu must be held.
func (r *room) drop(w *waiter) {
	r.waiting.remove(w)
	delete(r.byID, w.id)
}

// evictOldest closes the connection that has waited longest, counted as
// an eviction, and reports whether there was one: the first descriptor to
// give back when accept runs out of them.
func (r *room) evictOldest() bool {
	r.mu.Lock()
	w := r.waiting.front()
	if w != nil {
		r.drop(w)
	}
	r.mu.Unlock()
	if w == nil {
		return false
	}
	r.l.counters.countEviction()
	_ = w.nc.Close()
	return true
}

func (r *room) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// release closes the room to newcomers and returns every connection in
// it, no longer watched, for the caller to close or hand on.
func (r *room) release() (all []*waiter, first bool) {
	r.mu.Lock()
	first = !r.closed
	r.closed = true
	for w := r.waiting.front(); w != nil; w = r.waiting.front() {
		r.drop(w)
		all = append(all, w)
	}
	r.mu.Unlock()
	return all, first
}

// fail gives up the room after its poller failed, which no client can
// make it do. What waits goes to the slots, as a connection without a
// whole header does where there is no room, rather than being closed:
// a probe among them is still answered. It logs once.
func (r *room) fail(err error) {
	all, first := r.release()
	if first {
		r.l.log(slog.LevelError, "health: the waiting room failed; connections without a whole request will wait in connection slots, evicted under a flood", "err", err)
	}
	for i, w := range all {
		r.poller.unwatch(w.fd)
		if !r.l.hand(handed{nc: w.nc, p: peekedIncomplete}) {
			for _, w := range all[i+1:] { // Serve has stopped
				_ = w.nc.Close()
			}
			return
		}
	}
}

// close closes every connection in the room, then the poller, which ends
// the room's goroutine: Serve is stopping.
func (r *room) close() {
	all, _ := r.release()
	for _, w := range all {
		_ = w.nc.Close()
	}
	_ = r.poller.close()
}

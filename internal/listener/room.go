package listener

import (
	"errors"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"
)

// A room holds accepted connections without a goroutine or a buffer of
// their own: those whose header has not arrived whole, and those answered
// that net/http would still hold (hold.go). Their bytes stay in the
// kernel's receive buffer; on each arrival the epoll set reports, the
// room's goroutine peeks again, or drains a body. Holding rather than
// evicting keeps a flood from becoming a reconnect storm, which cost many
// times a plain server's CPU (SPEC v4).
type room struct {
	l      *connLimiter
	set    *epollSet
	size   int
	reader *reader // the room's goroutine's

	mu        sync.Mutex
	waiting   waiterList         // for a header or a body, by accept: deadline order
	lingering waiterList         // by the start of their linger: deadline order too
	byID      map[uint64]*waiter // either, by the id the epoll set reports
	lastID    uint64             // ids are never reused: see drop
	armed     int64              // the epoll set's deadline; 0 for none
	stopping  bool               // Serve stopping: only answered connections join
	finishing bool               // net/http done too: the goroutine ends once the room is empty
	closed    bool               // ended, or the epoll set failed: nothing joins
	fullLog   logGate
	expired   []*waiter     // expire's scratch
	ended     chan struct{} // closed as the room's goroutine returns
}

// waiter is a connection in the room.
type waiter struct {
	nc       net.Conn
	fd       int32
	id       uint64
	deadline int64    // MonotonicNow at accept, plus headerTimeout; or the linger's end
	hold     holdKind // holdNone while its header is awaited
	drain    drain    // for holdDrain
	parses   uint8    // net/http's parses left to judge its header (maxParses: Accept's peek had one)
	// seen is how many bytes of its header the room has peeked at, and
	// where its peek offset stands, header their lines; -1 where the
	// next peek is to be a whole, rewound one (reader.repeek).
	seen   int
	header headerScanner
	links[waiter]
}

type waiterList = list[waiter, *waiter]

// readyEvent is the epoll set's report of one connection: its id, whether
// its client has shut its sending side (a FIN), whether the connection
// has failed (a reset), and whether an urgent byte is pending.
type readyEvent struct {
	id                     uint64
	hangup, failed, urgent bool
}

var makeEpollSet = newEpollSet // a test's to make fail

// newRoom returns l's room of size, or nil where none can be made: outside
// Linux quietly, on Linux with a warning; l's slots then hold what waits.
func newRoom(l *connLimiter, size int, answer AnswerFunc) *room {
	p, err := makeEpollSet()
	if err != nil {
		if !errors.Is(err, errors.ErrUnsupported) {
			l.log(slog.LevelWarn, "health: cannot make the waiting room; connections without a whole request will wait in connection slots, evicted under a flood", "err", err)
		}
		return nil
	}
	return &room{l: l, set: p, size: size, reader: newReader(answer), byID: make(map[uint64]*waiter), ended: make(chan struct{})}
}

// add has nc, accepted at accepted, wait for its header (holdNone), or be
// held after its answer (kind, d), and reports whether it does: not when
// nc has no descriptor, the room is closed, or, Serve stopping, nc awaits
// its header. Full, the room first closes its oldest.
func (r *room) add(nc net.Conn, fd int32, kind holdKind, d drain, accepted int64) bool {
	if fd < 0 {
		return false
	}
	now := MonotonicNow()
	w := &waiter{nc: nc, fd: fd, deadline: accepted + int64(headerTimeout), hold: kind, drain: d, parses: maxParses - 1, seen: -1}
	list := &r.waiting
	if kind == holdLinger {
		w.deadline, list = now+int64(rstAvoidanceDelay), &r.lingering
	}
	r.mu.Lock()
	if r.closed || r.stopping && kind == holdNone {
		r.mu.Unlock()
		return false
	}
	r.lastID++
	w.id = r.lastID
	if err := r.set.watch(fd, w.id); err != nil {
		r.mu.Unlock()
		return false
	}
	var victim *waiter
	if r.waiting.len+r.lingering.len >= r.size {
		victim = r.oldest()
		r.drop(victim)
	}
	list.pushBack(w)
	r.byID[w.id] = w
	r.arm(w.deadline)
	logNow := victim != nil && r.fullLog.due(time.Now())
	r.mu.Unlock()
	if victim != nil {
		r.l.counters.countEviction() // first, so a client that sees the close finds it counted
		_ = victim.nc.Close()
		if logNow {
			r.l.log(slog.LevelWarn, "health: waiting room full; closing the connections that have waited longest", "waiting", r.size)
		}
	}
	return true
}

// hold takes nc, answered by net/http, to hold as net/http would have
// (kind, d), and reports whether it did; if not, the caller closes nc.
func (r *room) hold(nc net.Conn, kind holdKind, d drain, accepted int64) bool {
	_ = nc.SetReadDeadline(time.Time{}) // stopReading's, on which the room's reads would fail
	return r.add(nc, descriptorOf(nc), endOrHold(nc, kind), d, accepted)
}

// oldest is the connection to evict: the oldest lingering one, soon
// closed anyway, else the one that has waited longest. r.mu must be held.
func (r *room) oldest() *waiter {
	if w := r.lingering.front(); w != nil {
		return w
	}
	return r.waiting.front()
}

// run is the room's goroutine, until the room is closed or finished.
func (r *room) run() {
	defer r.l.goroutines.Done()
	defer close(r.ended)
	defer r.set.close()
	for {
		ready, err := r.set.wait()
		r.mu.Lock()
		closed := r.closed
		if errors.Is(err, os.ErrDeadlineExceeded) {
			r.armed = 0 // spent: expire arms it anew, even for the same deadline
			err = nil
		}
		r.mu.Unlock()
		switch {
		case closed:
			return
		case err != nil:
			r.fail(err)
			return
		}
		for _, ev := range ready {
			r.examine(ev)
		}
		if r.expire() {
			return
		}
	}
}

// examine deals with the connection ev reports: one awaiting its header is
// peeked at again, one held for its body drained, and one lingering left
// unread. It runs under r.mu, system calls and all, so that no eviction
// closes a connection halfway through; only the hand-off, which may wait,
// comes after.
func (r *room) examine(ev readyEvent) {
	r.mu.Lock()
	w := r.byID[ev.id]
	handOn, p := false, peekedIncomplete
	switch {
	case w == nil: // dropped since
	case w.hold == holdDrain:
		r.next(w, r.reader.drain(w.nc, &w.drain, ev.failed))
	case w.hold == holdNone:
		handOn, p = r.answer(w, ev)
	}
	r.mu.Unlock()
	if handOn {
		r.set.unwatch(w.fd) // net/http reads it from now on
		r.l.hand(handed{nc: w.nc, p: p}, r.reader)
	}
}

// answer peeks again at w, awaiting its header, and settles it once its
// header is whole, too large, refused, or its client has gone (a reset one
// unpeeked). A partial header whose client shut its side gets net/http's
// 400, as net/http answers every such header. What is not settled is to
// be handed to net/http, as p. r.mu must be held.
func (r *room) answer(w *waiter, ev readyEvent) (handOn bool, p peeked) {
	p, n := peekedClosed, 0
	if !ev.failed {
		if w.seen >= 0 && !ev.hangup && !ev.urgent && r.reader.unchanged(w.nc, &w.seen, &w.header) {
			return false, peekedIncomplete
		}
		var offset bool
		p, n, offset = r.reader.repeek(w.nc, ev.urgent)
		w.seen, w.header = -1, headerScanner{}
		if offset {
			w.seen = n
			w.header.scan(r.reader.buf[:n])
		}
	}
	settled, kind, d := r.reader.settle(w.nc, p, n, &w.parses)
	switch {
	case !settled && p.awaited() && !ev.hangup:
		return false, p
	case !settled && p == peekedIncomplete:
		kind = r.reader.refuseMalformed(w.nc)
	case !settled:
		r.drop(w)
		return true, p
	}
	w.drain = d
	if kind == holdDrain {
		// More of the body may be queued than the peek saw, and an
		// edge-triggered set reports no arrival that came before.
		kind = r.reader.drain(w.nc, &w.drain, false)
	}
	r.next(w, kind)
	return false, p
}

// next moves w to what follows, kind: gone (its connection closed),
// drained, or lingering from now. r.mu must be held.
func (r *room) next(w *waiter, kind holdKind) {
	switch {
	case kind == holdNone:
		r.drop(w)
	case kind == holdLinger && w.hold != holdLinger:
		r.waiting.remove(w)
		w.deadline = MonotonicNow() + int64(rstAvoidanceDelay)
		r.lingering.pushBack(w)
		r.arm(w.deadline)
	}
	w.hold = kind
}

// expire ends the holds whose time has passed (no eviction), as net/http
// ends them: a header never completed by its ReadHeaderTimeout
// (timedOut), a body never completed by its read deadline (failedDrain),
// a linger in the close. It arms the epoll set for the next deadline, and
// reports whether the room, finishing, is empty, and so closed.
func (r *room) expire() (finished bool) {
	now := MonotonicNow()
	r.mu.Lock()
	expired := r.expired[:0]
	for w := r.waiting.front(); w != nil && w.deadline <= now; w = r.waiting.front() {
		if w.hold == holdDrain && w.drain.giveUp(failedDrain) == holdLinger {
			r.next(w, endOrHold(w.nc, holdLinger))
			continue
		}
		r.drop(w)
		expired = append(expired, w)
	}
	for w := r.lingering.front(); w != nil && w.deadline <= now; w = r.lingering.front() {
		r.drop(w)
		expired = append(expired, w)
	}
	var next int64
	for _, w := range [...]*waiter{r.waiting.front(), r.lingering.front()} {
		if w != nil && (next == 0 || w.deadline < next) {
			next = w.deadline
		}
	}
	if next != r.armed {
		r.set.setDeadline(next)
		r.armed = next
	}
	r.expired = expired
	finished = r.finishing && next == 0
	r.closed = r.closed || finished
	r.mu.Unlock()
	for i, w := range expired {
		if w.hold == holdNone {
			r.reader.timedOut(w.nc)
		} else {
			_ = w.nc.Close()
		}
		expired[i] = nil
	}
	return finished
}

// arm sets the epoll set's deadline to deadline, if none is set or it
// comes first. r.mu must be held, so that arms never cross.
func (r *room) arm(deadline int64) {
	if r.armed == 0 || deadline < r.armed {
		r.set.setDeadline(deadline)
		r.armed = deadline
	}
}

// drop stops holding w. It stays in the epoll set until its socket
// closes, which saves a system call a connection. A later report of it
// carries an id never used again, so it is ignored, even where a child
// between fork and exec (an agent runs ip, wg, iptables) keeps the socket
// open and its descriptor number is reused. r.mu must be held.
func (r *room) drop(w *waiter) {
	if w.hold == holdLinger {
		r.lingering.remove(w)
	} else {
		r.waiting.remove(w)
	}
	delete(r.byID, w.id)
}

// closeOldest evicts the oldest connection, if there is one.
func (r *room) closeOldest() bool {
	r.mu.Lock()
	w := r.oldest()
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

// take drops and returns the connections awaiting their header, or with
// all every connection. r.mu must be held.
func (r *room) take(all bool) []*waiter {
	var taken []*waiter
	for _, list := range [...]*waiterList{&r.lingering, &r.waiting} {
		for w := list.front(); w != nil; {
			next := w.next
			if all || w.hold == holdNone {
				r.drop(w)
				taken = append(taken, w)
			}
			w = next
		}
	}
	return taken
}

// fail gives up the room after its epoll set failed, which no client can
// cause. What awaits a header goes to net/http, so that a probe among them
// is still answered; what was answered is closed.
func (r *room) fail(err error) {
	r.mu.Lock()
	if r.closed { // Serve closed the set
		r.mu.Unlock()
		return
	}
	r.closed = true
	all := r.take(true)
	r.mu.Unlock()
	r.l.log(slog.LevelError, "health: the waiting room failed; connections without a whole request will wait in connection slots, evicted under a flood", "err", err)
	for i, w := range all {
		if w.hold != holdNone {
			_ = w.nc.Close()
			continue
		}
		r.set.unwatch(w.fd)
		if !r.l.hand(handed{nc: w.nc, p: peekedIncomplete}, r.reader) {
			for _, w := range all[i+1:] { // Serve has stopped
				r.reader.discard(w.nc)
				_ = w.nc.Close()
			}
			return
		}
	}
}

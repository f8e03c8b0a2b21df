package listener

import (
	"log/slog"
	"time"
)

// acceptLoop is the goroutine that accepts when there is a room: what the
// peek settles it settles, what has no whole header or is held after its
// answer goes to the room, and the rest, with the listener's errors, goes
// to net/http's Accept.
func (l *connLimiter) acceptLoop() {
	defer l.goroutines.Done()
	defer close(l.acceptEnd)
	r := l.accepting
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			if isOutOfDescriptors(err) {
				l.outOfDescriptors(err)
				continue
			}
			// net/http decides whether it is fatal, and if so closes the
			// listener, which ends the hand-off.
			if !l.hand(handed{err: err}, r) {
				return
			}
			continue
		}
		l.counters.Accepted.Add(1)
		p, n := r.peek(nc)
		parses := uint8(1) // of maxParses: the room has the rest
		settled, kind, d := r.settle(nc, p, n, &parses)
		switch {
		case settled && kind != holdNone:
			if !l.room.add(nc, r.calls.fd, kind, d, MonotonicNow()) {
				_ = nc.Close() // Serve is stopping: nothing to hold it for
			}
			continue
		case settled, p.awaited() && l.room.add(nc, r.calls.fd, holdNone, drain{}, MonotonicNow()):
			continue
		}
		if !l.hand(handed{nc: nc, p: p}, r) {
			return
		}
	}
}

// descriptorRetry is how long Accept, out of descriptors, waits for a
// connection to queue, and how long it waits when it holds nothing it
// could close: then only time frees a descriptor.
const descriptorRetry = 10 * time.Millisecond

// outOfDescriptors makes room after accept failed for lack of
// descriptors, rather than backing off as net/http would while the
// kubelet's connection waits in the kernel's queue. If someone is
// connecting (acceptQueued), it closes the connection that has waited
// longest in the room, else the oldest slot without a request, else waits
// for a slot being answered to end, or, when Serve holds nothing, waits
// descriptorRetry.
func (l *connLimiter) outOfDescriptors(err error) {
	l.warn(&l.outOfFDLog, "health: out of file descriptors; closing the oldest connections that have not sent a whole request", err)
	queued, pollErr := acceptQueued(l.Listener, descriptorRetry)
	if pollErr != nil {
		l.warn(&l.pollLog, "health: out of file descriptors, and cannot tell whether a connection waits; making room as if one did", pollErr)
	}
	if !queued {
		return
	}
	if l.room != nil && l.room.closeOldest() {
		return
	}
	l.mu.Lock()
	if victim := l.evictOldest(true); victim != nil {
		l.mu.Unlock()
		_ = victim.Conn.Close()
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

// warn writes msg through gate, with err and the slots held, which an
// operator sizing the agent's descriptor limit needs.
func (l *connLimiter) warn(gate *logGate, msg string, err error) {
	l.mu.Lock()
	logNow := gate.due(time.Now())
	held := l.held
	l.mu.Unlock()
	if logNow {
		l.log(slog.LevelWarn, msg, "held", held, "err", err)
	}
}

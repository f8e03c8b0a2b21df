package listener

import "net"

// reader is what a goroutine that takes connections in uses to look at
// them: its system calls, its peek buffer and its short path. Each such
// goroutine (the one that accepts, the room's) has its own, so none needs
// a lock.
type reader struct {
	calls *connCalls
	buf   []byte     // the peek's, maxRequestBytes long
	short *shortPath // nil: nothing is answered at accept
}

func newReader(answer AnswerFunc) *reader {
	r := &reader{calls: newConnCalls(), buf: make([]byte, maxRequestBytes)}
	if answer != nil {
		r.short = newShortPath(answer)
	}
	return r
}

// peek looks at what has arrived on nc so far, without consuming it (see
// connCalls.peek).
func (r *reader) peek(nc net.Conn) (peeked, int) { return r.calls.peek(nc, r.buf) }

// settle deals with nc by what its peek p, of n bytes, found, and reports
// whether it did, or nc is still to be served: a header already over the
// cap is refused with net/http's 431, a connection whose client has gone
// is closed, and a whole request parseRequest takes is answered
// (shortPath). None of them costs net/http a goroutine. What the answer
// leaves to hold (hold.go) is returned for the room to keep; where there
// is no room (canHold false), nothing that would need holding is settled.
// It must follow r's peek of nc.
func (r *reader) settle(nc net.Conn, p peeked, n int, canHold bool) (bool, holdKind, drain) {
	switch {
	case p == peekedOversized:
		return true, refuse(r.calls, nc, r.buf[:n], canHold), drain{}
	case p == peekedClosed:
		_ = nc.Close()
	case p == peekedComplete && r.short != nil:
		return r.short.answer(r.calls, nc, r.buf, n, canHold)
	default:
		return false, holdNone, drain{}
	}
	return true, holdNone, drain{}
}

// drain reads and discards what has arrived of the body of nc, held after
// its answer, and returns what follows (see hold.go), having closed nc for
// holdNone or shut its side for holdLinger. failed says the poller saw
// the connection fail.
func (r *reader) drain(nc net.Conn, d *drain, failed bool) holdKind {
	kind := holdDrain
	for kind == holdDrain {
		n, ok := r.calls.readFrom(nc, r.buf)
		switch {
		case failed || !ok:
			kind = failedDrain // the client's FIN, or a reset
		case n == 0:
			return holdDrain // nothing more yet
		default:
			kind = d.consume(r.buf[:n])
		}
	}
	switch kind {
	case holdNone:
		_ = nc.Close()
	case holdLinger:
		shutWrite(nc)
	}
	return kind
}

// discard reads what nc's client has sent so far, up to the peek's
// buffer, before nc is closed at its header timeout: Linux answers a close
// with unread bytes in the receive queue with a reset, where net/http,
// which has read the partial header into its buffer, ends the connection
// with a FIN. It costs the connection a second RawConn, at its deadline
// and never on a probe's way.
func (r *reader) discard(nc net.Conn) {
	if _, n := r.peek(nc); n > 0 {
		r.calls.read(r.buf[:n])
	}
}

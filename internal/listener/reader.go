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
// is closed, and a whole plain probe is answered (shortPath). None of them
// costs net/http a goroutine. It must follow r's peek of nc.
func (r *reader) settle(nc net.Conn, p peeked, n int) bool {
	switch {
	case p == peekedOversized:
		refuse(r.calls, nc)
	case p == peekedClosed:
		_ = nc.Close()
	case p == peekedComplete && r.short != nil && r.short.answer(r.calls, nc, r.buf, n):
	default:
		return false
	}
	return true
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

package listener

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"time"
)

// maxRequestBytes caps what a connection may send before the end of its
// request header: 4 KiB less a byte, room for a kubelet's request (about
// 130 bytes) with as many custom httpHeaders as the 64-line cap allows.
//
// It is also the first of this file's guards against net/http's linger.
// When net/http refuses a request (a header over MaxHeaderBytes + 4 KiB;
// since Go 1.27, over its count of header values) or answers one whose body
// it will not drain (over 256 KiB; since Go 1.27, any it could not drain),
// it half-closes the connection and sleeps 500 ms before closing it
// (closeWriteAndWait in net/http's server.go), so that the client reads the
// answer before a reset. The connection's goroutine holds its slot all that
// time, where it cannot be evicted, and a client that provokes it in a loop
// holds every slot. So a header that reaches this cap, below net/http's, is
// refused here with net/http's own 431 bytes (response431), at accept when
// the bytes are already there (connCalls.peek), else by ending the read, on
// which net/http closes at once; closeAfterBody keeps net/http from
// draining a body, and limitHeaderValues from counting values. Keep-alive
// is off, and once a request has been read every further read fails
// (stopReading), so nothing but the request is ever read.
const maxRequestBytes = 4<<10 - 1

// maxHeaderLines caps the lines of a request header, a dozen times a
// kubelet's request with a few custom headers: 4 KiB holds a thousand short
// lines, and net/http builds a map of every header before it answers (and,
// since Go 1.27, refuses more than 500 values and lingers: see
// maxRequestBytes). Such a request is refused with the same 431.
const maxHeaderLines = 64

// response431 is the answer net/http gives an oversized header, byte for
// byte (TestResponse431IsNetHTTPs compares the two), so that a client
// cannot tell who sent it.
const response431 = "HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n431 Request Header Fields Too Large"

// stopReading makes every further read of a connection whose request has
// been read fail at once. Serve reads nothing after a request, so any
// later read is net/http reading a body: after answering a request with
// an Expect it does not support (417), it waits up to the read timeout
// for up to 256 KiB of body, holding a connection that can no longer be
// evicted. The request's context is cancelled as a side effect, which the
// probe handler does not look at.
func stopReading(nc net.Conn) { _ = nc.SetReadDeadline(aLongTimeAgo) }

// aLongTimeAgo is a read deadline already past.
var aLongTimeAgo = time.Unix(1, 0)

// refuse answers a connection whose header is already over the cap as
// net/http would, without handing it to net/http: a flood of oversized
// headers then costs no goroutine and no buffers. calls is the connCalls
// that peeked nc, and header what the peek saw, read first as net/http
// reads it. The answer is a few dozen bytes on a fresh socket, but nothing
// here waits even for a client that keeps its receive window shut, so it
// is written with one write that never waits, and whatever the send
// buffer does not take is dropped. Then, as net/http does, the connection
// lingers (hold.go) where the room can hold it, and is closed where not.
func refuse(calls *connCalls, nc net.Conn, header []byte, canHold bool) holdKind {
	calls.read(header)
	calls.write(response431Bytes)
	if !canHold {
		_ = nc.Close()
		return holdNone
	}
	shutWrite(nc)
	return holdLinger
}

var response431Bytes = []byte(response431)

// headerScanner finds the blank line that ends an HTTP/1 request header,
// across reads, and counts the header's lines up to it: what comes after
// (a body, a pipelined request) is not the header's. net/http accepts "\n"
// as well as "\r\n" as a line end, so both count.
type headerScanner struct {
	lines     int
	lineEmpty bool // only '\r' since the last '\n'
	done      bool // the blank line has been seen
}

func (s *headerScanner) scan(p []byte) {
	// From line end to line end: the waiting room rescans a header on
	// every byte a slow client sends, so a long line must cost one
	// IndexByte, not a loop over its bytes.
	for len(p) > 0 && !s.done {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			s.lineEmpty = s.lineEmpty && onlyCR(p)
			return
		}
		s.lines++
		s.done = s.lineEmpty && onlyCR(p[:i])
		s.lineEmpty = true
		p = p[i+1:]
	}
}

func onlyCR(p []byte) bool {
	for _, b := range p {
		if b != '\r' {
			return false
		}
	}
	return true
}

// peeked is what Accept saw of a new connection's request before handing
// it to net/http.
type peeked uint8

const (
	peekedIncomplete peeked = iota // part of a header, or no way to look
	peekedComplete                 // a whole request header
	peekedOversized                // maxRequestBytes without the end of a header, or more than maxHeaderLines
	peekedEmpty                    // nothing yet
	peekedClosed                   // the client's FIN with nothing before it, or a reset
	peekedUrgent                   // part of a header, then an urgent byte: net/http's to read
)

// closeAfterBody wraps Serve's handler. A probe has no body, so a request
// with one is a client Serve need not humour: it gets its answer, and its
// connection is closed without the body being read. Left to itself,
// net/http would drain the body after the answer, or linger over one it
// will not drain (see maxRequestBytes). So the handler flushes its answer
// and aborts with http.ErrAbortHandler, on which net/http closes at once,
// logs nothing and returns the connection's buffers to its pools (the
// answer's own 2 KiB buffer is lost, a cost only of requests with a body,
// never of a probe's). It aborts even when the flush fails, because a
// client that reset its connection would otherwise get the linger too. A
// client that sends a body may see its connection reset before it reads
// the answer.
type closeAfterBody struct{ handler http.Handler }

func (h closeAfterBody) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.handler.ServeHTTP(w, r)
	if r.ContentLength == 0 {
		return
	}
	_ = http.NewResponseController(w).Flush() // failed: the client is gone, nothing to tell
	panic(http.ErrAbortHandler)
}

// Read lets net/http read at most maxRequestBytes and a header of at most
// maxHeaderLines. Past either it fails the read as a broken connection
// does, so that net/http closes at once rather than answer 431 itself and
// linger, and, if net/http was still reading the header, it answers that
// 431 first.
func (c *limitedConn) Read(p []byte) (int, error) {
	if c.read >= maxRequestBytes || c.header.lines > maxHeaderLines {
		return 0, c.refuse()
	}
	if len(p) > maxRequestBytes-c.read {
		p = p[:maxRequestBytes-c.read]
	}
	n, err := c.Conn.Read(p)
	c.read += n
	c.header.scan(p[:n])
	if c.header.lines > maxHeaderLines {
		// Before net/http sees these lines: it would build a map of
		// them all before it could refuse them.
		return 0, c.refuse()
	}
	return n, err
}

// refuse answers 431 as net/http would, once and only while net/http is
// still reading the header, and returns the error that makes it close.
func (c *limitedConn) refuse() error {
	if !c.refused && c.limiter.stillWaiting(c) {
		_, _ = io.WriteString(c.Conn, response431)
	}
	c.refused = true
	return &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: errRequestTooLarge}
}

var errRequestTooLarge = errors.New("health: request header too large")

// stillWaiting reports whether net/http has yet to read c's request.
func (l *connLimiter) stillWaiting(c *limitedConn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return c.state == slotWaiting
}

// limitedConn is a connection in one of net/http's slots.
type limitedConn struct {
	net.Conn
	limiter *connLimiter

	state slotState // guarded by limiter.mu
	links[limitedConn]

	// Used by the goroutine reading the connection only (net/http's reads
	// never overlap).
	read    int           // bytes read so far
	header  headerScanner // the request header's lines, as read so far
	refused bool          // the request has been refused as too large
}

// connList is a list of connections in slots, oldest first.
type connList = list[limitedConn, *limitedConn]

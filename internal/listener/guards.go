package listener

import (
	"errors"
	"io"
	"net"
	"net/http"
	"time"
)

// stopReading makes every further read of a connection whose request has
// been read fail at once. Serve reads nothing after a request, so a later
// read is net/http draining a body, as after its 417 to an Expect it does
// not support, in a slot that can no longer be evicted. It also cancels
// the request's context, which the probe handler does not look at.
func stopReading(nc net.Conn) { _ = nc.SetReadDeadline(aLongTimeAgo) }

var aLongTimeAgo = time.Unix(1, 0)

// closeAfterBody wraps Serve's handler. Left to itself, net/http would
// drain or linger over a request's body after the answer (hold.go), in a
// slot that cannot be evicted. So the handler flushes its answer and
// aborts with http.ErrAbortHandler, on which net/http closes at once, logs
// nothing and returns the connection's buffers to its pools, all but the
// answer's 2 KiB, a loss only with a body. The close hands the connection
// to the room, if any, to be held as net/http would (limitedConn.Close);
// without one, a client that sends a body may see a reset before the
// answer. It aborts even when the flush fails: a client that reset its
// connection would otherwise get the linger too.
type closeAfterBody struct{ handler http.Handler }

func (h closeAfterBody) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.handler.ServeHTTP(w, r)
	if r.ContentLength == 0 {
		return
	}
	_ = http.NewResponseController(w).Flush() // failed: the client is gone, nothing to tell
	if c, ok := r.Context().Value(connKey{}).(*limitedConn); ok {
		c.holdAfter(r)
	}
	panic(http.ErrAbortHandler)
}

// connKey keys a request's limitedConn in its context (ConnContext).
type connKey struct{}

// holdAfter readies c, answered, to be held as net/http would hold it
// after r's answer, from what of r's body net/http has read.
func (c *limitedConn) holdAfter(r *http.Request) {
	if c.limiter.room == nil {
		return
	}
	req := request{
		length:  max(r.ContentLength, 0),
		chunked: r.ContentLength < 0,
		closes:  r.Close,
		expect:  r.ProtoAtLeast(1, 1) && hasToken([]byte(r.Header.Get("Expect")), "100-continue"),
	}
	kind, d := holdFor(&req, c.body)
	c.limiter.mu.Lock()
	c.hold, c.drain = kind, d
	c.limiter.mu.Unlock()
}

// Close closes c, or hands it to the room where it is to be held after
// its answer (holdAfter). Once: Server.Close may close it too, from
// another goroutine.
func (c *limitedConn) Close() error {
	c.limiter.mu.Lock()
	kind, d := c.hold, c.drain
	c.hold = holdNone
	c.limiter.mu.Unlock()
	if kind == holdNone || !c.limiter.room.hold(c.Conn, kind, d, c.admitted) {
		return c.Conn.Close()
	}
	return nil
}

// Read lets net/http read at most maxRequestBytes and maxHeaderFields.
// Past either it answers 431 itself (refuse) and fails the read as a
// broken connection does, so that net/http closes at once.
func (c *limitedConn) Read(p []byte) (int, error) {
	if c.read >= maxRequestBytes || c.header.tooManyFields() {
		return 0, c.refuse()
	}
	if len(p) > maxRequestBytes-c.read {
		p = p[:maxRequestBytes-c.read]
	}
	n, err := c.Conn.Read(p)
	c.read += n
	if after := c.header.scan(p[:n]); len(after) > 0 && c.limiter.room != nil {
		c.body = append(c.body, after...) // what net/http has read of a body
	}
	if c.header.tooManyFields() {
		return 0, c.refuse()
	}
	return n, err
}

// refuse answers 431 as net/http would, once, and only while net/http is
// still reading the header, with its linger where there is a room; and
// returns the error that makes net/http close.
func (c *limitedConn) refuse() error {
	if !c.refused && c.limiter.stillWaiting(c) {
		_, _ = io.WriteString(c.Conn, response431)
		if c.limiter.room != nil {
			c.limiter.mu.Lock()
			c.hold = holdLinger
			c.limiter.mu.Unlock()
		}
		c.refused = true // never once answered: net/http's background read comes here too
	}
	return &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: errRequestTooLarge}
}

// Write writes nothing once the request has been refused: net/http takes
// the last line it read, cut off by the cap, as whole, and would answer
// 400 to one without a colon after the 431. net/http writes from the
// goroutine that read the header, which alone sets refused.
func (c *limitedConn) Write(p []byte) (int, error) {
	if c.refused {
		return 0, errRequestTooLarge
	}
	return c.Conn.Write(p)
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
	body    []byte        // what has been read past the header, with a room

	admitted int64    // MonotonicNow when admitted, about its accept
	hold     holdKind // what the room is to do once net/http closes it; guarded by limiter.mu
	drain    drain    // guarded by limiter.mu
}

//go:build unix

package listener

import (
	"net"
	"syscall"
)

// connCalls makes the system calls of a goroutine that takes connections
// in (see reader): the peek, the read and the write. The connection's
// syscall.RawConn is got once, by peek, and serves all three. Each call's
// inputs and results are fields and its callback a method value bound once, so that passing it to the RawConn allocates no
// closure: the RawConn is the only allocation of ours per connection
// (TestAcceptCallsAllocate). A connCalls is its reader's goroutine's.
type connCalls struct {
	rc  syscall.RawConn // the connection last peeked; nil when it has none
	fd  int32           // its descriptor, for the waiting room; -1 when it has none
	p   []byte          // the call's buffer
	n   int             // the call's byte count
	err error           // the call's error

	oob     [1]byte // urgent's buffer
	off     int     // pastUrgent's peek offset
	rewind  bool    // the peek starts from a peek offset of 0
	rewound bool    // it did: the peek offset now stands past what it saw
	// noPeekOffset: the kernel has no SO_PEEK_OFF for TCP (before Linux
	// 6.9), and peeks are not rewound, which would fail on every arrival.
	noPeekOffset bool

	peekFunc, readFunc, writeFunc, urgentFunc, pastUrgentFunc func(fd uintptr) bool
}

func newConnCalls() *connCalls {
	c := new(connCalls)
	c.peekFunc, c.readFunc, c.writeFunc, c.urgentFunc = c.peekFD, c.readFD, c.writeFD, c.urgentFD
	c.pastUrgentFunc = c.pastUrgentFD
	return c
}

// peek looks at what has already arrived on nc, without consuming it or
// waiting, for the end of a request header, and returns what it found and
// how many bytes it looked at, from the start of buf. buf, maxRequestBytes
// long, bounds how much is looked at. It looks for an urgent byte only if
// urgentPossible: the epoll set says whether one is pending, which spares
// a system call on every arrival of a trickled header. With rewind, it
// first sets the socket's peek offset to 0, where the kernel has the
// option, so that it sees every byte however far the room's last peek got
// (peekMore); unless it then looks past an urgent byte, the offset stands
// past what it saw (c.rewound). It makes nc the connection that read and
// write act on. What is done with what it finds is settle's, the room's
// and Accept's to say.
func (c *connCalls) peek(nc net.Conn, buf []byte, urgentPossible, rewind bool) (peeked, int) {
	c.rc, c.fd, c.rewound = nil, -1, false
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return peekedIncomplete, 0
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return peekedIncomplete, 0
	}
	c.rc = rc
	c.p, c.rewind = buf, rewind
	n, err := c.result(rc.Read(c.peekFunc))
	c.rewind = false
	switch {
	case err == syscall.EAGAIN || err == syscall.EINTR:
		return peekedEmpty, 0
	case err != nil, n == 0:
		return peekedClosed, 0 // reset, or nothing before the client's FIN
	}
	var header headerScanner
	header.scan(buf[:n])
	if urgentPossible && !header.done && n < len(buf) && c.urgent() {
		more, ok := c.peekPastUrgent(buf[n:], n)
		if !ok {
			return peekedUrgent, n
		}
		header.scan(buf[n : n+more])
		n += more
	}
	switch {
	case header.tooManyFields():
		return peekedOversized, n
	case header.done:
		return peekedComplete, n
	case n == len(buf):
		return peekedOversized, n
	}
	return peekedIncomplete, n
}

// urgent reports whether the connection last peeked has an urgent (TCP
// MSG_OOB) byte pending. A peek stops short of the urgent mark, where a
// read, as net/http's, skips the byte and goes on, so a header with such a
// byte in it would never look whole.
func (c *connCalls) urgent() bool {
	c.p = c.oob[:]
	n, _ := c.result(c.rc.Read(c.urgentFunc))
	return n == 1
}

// peekPastUrgent peeks, into p, at what has arrived past the urgent byte
// pending on the connection last peeked, whose peek found n bytes, and
// returns how many it found; false where it cannot look (pastUrgentFD;
// see peeked.awaited).
func (c *connCalls) peekPastUrgent(p []byte, n int) (int, bool) {
	c.p, c.off = p, n
	more, err := c.result(c.rc.Read(c.pastUrgentFunc))
	switch {
	case err == syscall.EAGAIN || err == syscall.EINTR:
		return 0, true
	case err != nil:
		return 0, false
	}
	return more, true
}

// descriptorOf is nc's descriptor, for the room, or -1 where it has none.
func descriptorOf(nc net.Conn) int32 {
	fd := int32(-1)
	if sc, ok := nc.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			_ = rc.Control(func(d uintptr) { fd = int32(d) })
		}
	}
	return fd
}

// result returns the count and error of the call just made, given the
// error of the RawConn's Read or Write around it (only a closed
// connection's), and lets go of the call's buffer.
func (c *connCalls) result(rawErr error) (int, error) {
	n, err := c.n, c.err
	if rawErr != nil {
		n, err = 0, rawErr
	}
	c.p, c.n, c.err = nil, 0, nil
	return n, err
}

// read reads p from the connection last peeked, with system calls that
// never wait, and reports whether it read all of p: bytes the peek saw,
// already in the receive queue, so anything less means the connection is
// broken. It takes one call, or two where a read stops at an urgent mark.
func (c *connCalls) read(p []byte) bool {
	for len(p) > 0 && c.rc != nil {
		c.p = p
		n, err := c.result(c.rc.Read(c.readFunc))
		if err != nil || n <= 0 {
			return false
		}
		p = p[n:]
	}
	return c.rc != nil
}

// write writes p to the connection last peeked, with one system call that
// never waits: whatever the send buffer does not take at once is dropped.
func (c *connCalls) write(p []byte) {
	if c.rc == nil {
		return
	}
	c.p = p
	_, _ = c.result(c.rc.Write(c.writeFunc))
}

// readFrom reads what has arrived on nc into p, with one system call that
// never waits, and reports false once nc has ended or failed; 0 bytes and
// true say nothing has arrived. It makes nc the connection read and write
// act on.
func (c *connCalls) readFrom(nc net.Conn, p []byte) (int, bool) {
	return c.callOn(nc, p, c.readFunc)
}

// peekMore is readFrom with a peek: where a rewound peek set nc's peek
// offset, it looks only at what has arrived since the last peek.
func (c *connCalls) peekMore(nc net.Conn, p []byte) (int, bool) {
	return c.callOn(nc, p, c.peekFunc)
}

func (c *connCalls) callOn(nc net.Conn, p []byte, call func(fd uintptr) bool) (int, bool) {
	c.rc = nil
	if sc, ok := nc.(syscall.Conn); ok {
		c.rc, _ = sc.SyscallConn()
	}
	if c.rc == nil {
		return 0, false
	}
	c.p = p
	n, err := c.result(c.rc.Read(call))
	if err == syscall.EAGAIN || err == syscall.EINTR {
		return 0, true
	}
	return n, err == nil && n > 0
}

// The callbacks return true, so that the RawConn never waits: the socket
// is non-blocking, and a call that would block fails with EAGAIN.

func (c *connCalls) peekFD(fd uintptr) bool {
	c.fd = int32(fd)
	if c.rewind && !c.noPeekOffset {
		err := setPeekOffset(fd, 0)
		c.rewound, c.noPeekOffset = err == nil, err == syscall.EOPNOTSUPP
	}
	c.n, _, c.err = syscall.Recvfrom(int(fd), c.p, syscall.MSG_PEEK)
	return true
}

func (c *connCalls) urgentFD(fd uintptr) bool {
	c.n, _, c.err = syscall.Recvfrom(int(fd), c.p, syscall.MSG_OOB|syscall.MSG_PEEK)
	return true
}

func (c *connCalls) readFD(fd uintptr) bool {
	c.n, c.err = syscall.Read(int(fd), c.p)
	return true
}

func (c *connCalls) writeFD(fd uintptr) bool {
	c.n, c.err = syscall.Write(int(fd), c.p)
	return true
}

// discardUnread reads and drops what has arrived on a slot's connection,
// so that the close that follows ends in a FIN: closing a socket with
// bytes unread makes the kernel send a reset. Unlike reader.discard it
// takes no read lock (RawConn.Control, not Read): net/http's goroutine may
// be parked in Read on the connection, holding that lock until its header
// timeout, and a shutdown must not wait for it. No read here waits: every
// socket Go's net makes is non-blocking (one made blocking behind its back
// would already hang the accept's peek). If net/http's goroutine reads
// beside it, each takes part of the bytes; bytes that arrive after the
// last read still make the close a reset.
func discardUnread(nc net.Conn) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		var buf [maxRequestBytes]byte
		for range 4 { // as reader.discard: any header under the caps
			if n, err := syscall.Read(int(fd), buf[:]); err != nil || n <= 0 {
				return
			}
		}
	})
}

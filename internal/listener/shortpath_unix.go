//go:build unix

package listener

import (
	"net"
	"syscall"
)

// read reads p from the connection last peeked, with one system call that
// never waits, and reports whether it read all of p: bytes the peek saw,
// already in the receive queue, so anything less means the connection is
// broken.
func (c *connCalls) read(p []byte) bool {
	if c.rc == nil {
		return false
	}
	c.p = p
	n, err := c.result(c.rc.Read(c.readFunc))
	return err == nil && n == len(p)
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
	c.rc = nil
	if sc, ok := nc.(syscall.Conn); ok {
		c.rc, _ = sc.SyscallConn()
	}
	if c.rc == nil {
		return 0, false
	}
	c.p = p
	n, err := c.result(c.rc.Read(c.readFunc))
	if err == syscall.EAGAIN || err == syscall.EINTR {
		return 0, true
	}
	return n, err == nil && n > 0
}

func (c *connCalls) readFD(fd uintptr) bool {
	c.n, c.err = syscall.Read(int(fd), c.p)
	return true
}

func (c *connCalls) writeFD(fd uintptr) bool {
	c.n, c.err = syscall.Write(int(fd), c.p)
	return true
}

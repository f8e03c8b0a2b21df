package health

import (
	"net"
	"syscall"
)

// deferAcceptSeconds is how long the kernel keeps a connection that has
// sent nothing before handing it to Accept anyway: the header timeout,
// after which net/http would have closed it.
const deferAcceptSeconds = int(readHeaderTimeout / 1e9)

// setDeferAccept sets TCP_DEFER_ACCEPT on a listening socket: Accept then
// returns a connection only once its first bytes have arrived. A client
// that connects and stays silent waits in the kernel's queue, costing the
// process no descriptor and no slot, and a probe that is slow to write (a
// busy kubelet) is accepted with its request in hand, never grown old and
// empty in a churning pool. Listen sets it when it binds, so that it covers
// the first connection, and Serve sets it again on a listener made
// elsewhere.
func setDeferAccept(rc syscall.RawConn) error {
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_DEFER_ACCEPT, deferAcceptSeconds)
	}); err != nil {
		return err
	}
	return serr
}

// peekRequest looks at what has already arrived on c, without consuming it
// or waiting, for the end of a request header. buf, maxRequestBytes long,
// bounds how much is looked at. A connection accepted with its request
// complete is protected from eviction before its goroutine has even run,
// which on a busy machine can come after many newer connections have been
// accepted; one whose first maxRequestBytes hold no end of header is
// refused before net/http spends a goroutine and its buffers on it.
func peekRequest(c net.Conn, buf []byte) peeked {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return peekedIncomplete
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return peekedIncomplete
	}
	n := 0
	_ = rc.Read(func(fd uintptr) bool {
		n, _, _ = syscall.Recvfrom(int(fd), buf, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true // never wait for data: an empty queue is the answer
	})
	switch {
	case n > 0 && headerComplete(buf[:n]):
		return peekedComplete
	case n == len(buf):
		return peekedOversized
	}
	return peekedIncomplete
}

// headerComplete reports whether p holds the blank line that ends an
// HTTP/1 request header. net/http accepts "\n" as well as "\r\n" as a line
// end, so both count.
func headerComplete(p []byte) bool {
	lineEmpty := false // only '\r' since the last '\n'
	for _, b := range p {
		switch b {
		case '\n':
			if lineEmpty {
				return true
			}
			lineEmpty = true
		case '\r':
		default:
			lineEmpty = false
		}
	}
	return false
}

//go:build unix

package health

import (
	"net"
	"syscall"
)

// peekRequest looks at what has already arrived on c, without consuming it
// or waiting, for the end of a request header, and returns what it found
// and how many bytes it looked at, from the start of buf. buf,
// maxRequestBytes long, bounds how much is looked at. A connection accepted with its request
// complete is protected from eviction before its goroutine has even run,
// which on a busy machine can come after many newer connections have been
// accepted; one whose first maxRequestBytes hold no end of header, or
// more than maxHeaderLines, is refused before net/http spends a goroutine
// and its buffers on it. One that is empty may be held in quarantine, and
// one whose client has already gone, with a FIN and nothing before it or
// with a reset, is closed at once: net/http would read nothing from it
// but its end.
func peekRequest(c net.Conn, buf []byte) (peeked, int) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return peekedIncomplete, 0
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return peekedIncomplete, 0
	}
	n := 0
	var rerr error
	_ = rc.Read(func(fd uintptr) bool {
		n, _, rerr = syscall.Recvfrom(int(fd), buf, syscall.MSG_PEEK)
		return true // never wait: the socket is non-blocking, and an empty queue is the answer
	})
	switch {
	case rerr == syscall.EAGAIN || rerr == syscall.EINTR:
		return peekedEmpty, 0
	case rerr != nil, n == 0:
		return peekedClosed, 0 // reset, or nothing before the client's FIN
	}
	var header headerScanner
	header.scan(buf[:n])
	switch {
	case header.lines > maxHeaderLines:
		return peekedOversized, n
	case header.done:
		return peekedComplete, n
	case n == len(buf):
		return peekedOversized, n
	}
	return peekedIncomplete, n
}

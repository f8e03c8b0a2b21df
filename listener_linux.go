package health

import (
	"net"
	"syscall"
)

// deferAcceptSeconds is how long, under pressure, the kernel keeps a
// connection that has sent nothing before handing it to Accept anyway: the
// header timeout, after which net/http would have closed it.
const deferAcceptSeconds = int(readHeaderTimeout / 1e9)

// setDeferAccept sets or clears TCP_DEFER_ACCEPT on ln when it is a socket:
// while set, Accept returns a connection only once its first bytes have
// arrived.
func setDeferAccept(ln net.Listener, on bool) error {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return nil // not a socket (a test's listener, say): nothing to set
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	seconds := 0
	if on {
		seconds = deferAcceptSeconds
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_DEFER_ACCEPT, seconds)
	}); err != nil {
		return err
	}
	return serr
}

// requestComplete reports whether a whole request header has already
// arrived on c, by peeking at the socket's receive queue without consuming
// it or waiting. buf bounds how much is looked at.
func requestComplete(c net.Conn, buf []byte) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	n := 0
	_ = rc.Read(func(fd uintptr) bool {
		n, _, _ = syscall.Recvfrom(int(fd), buf, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true // never wait for data: an empty queue is the answer
	})
	var s headerScanner
	return n > 0 && s.scan(buf[:n])
}

package health

import (
	"net"
	"syscall"
)

// deferAcceptSeconds is how long the kernel keeps a connection that has sent
// nothing before handing it to Accept anyway. Until then a silent client
// costs the process no descriptor and no slot; it waits in the kernel's
// queue, where its request, once sent, arrives all the same.
const deferAcceptSeconds = int(readHeaderTimeout / 1e9)

// deferAccept sets TCP_DEFER_ACCEPT on ln when it is a socket, so that
// Accept returns a connection only once its first bytes have arrived.
func deferAccept(ln net.Listener) error {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return nil // not a socket (a test's listener, say): nothing to set
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_DEFER_ACCEPT, deferAcceptSeconds)
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

package listener

import (
	"syscall"
	"time"
)

// deferAcceptTimeout is how long the kernel keeps a connection that has
// sent nothing from Accept (TCP_DEFER_ACCEPT, rounded up to the
// retransmission schedule: 31 s), in the SYN queue, costing the process
// nothing; then it hands it over empty, Serve closes it, and it connects
// again. So the wait sets how often each silent client comes back, and
// under a flood every comeback pushes a probe that arrived empty (a SYN
// cookie, once the queue is full) closer to eviction: with the header
// timeout's 2 s (3 s rounded), each came back ten times as often, and
// under docs/load.md's SYN-cookie loads (11 and 12) a probe writing 20 ms
// late at a descriptor limit of 128 was lost far more often. A client
// that writes within 15 s is accepted the moment its bytes arrive. Later,
// one whose TCP keepalive has probed the waiting handshake (Go's dialer
// does at 15 s) has its bytes dropped by the kernel until the wait ends;
// with a 2 s wait it would have been closed long before it wrote.
const deferAcceptTimeout = 30 * time.Second

// setDeferAccept sets TCP_DEFER_ACCEPT on a listening socket, so that a
// silent client costs the process no descriptor and no slot, and a probe
// slow to write (a busy kubelet) is accepted with its request in hand.
// Listen sets it when it binds, to cover the first connection, and Serve
// again on a listener made elsewhere.
func setDeferAccept(rc syscall.RawConn) error {
	seconds := int(deferAcceptTimeout / time.Second)
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_DEFER_ACCEPT, seconds)
	}); err != nil {
		return err
	}
	return serr
}

package listener

import (
	"syscall"
	"time"
)

// deferAcceptTimeout is how long the kernel keeps a connection that has
// sent nothing before Accept sees it (TCP_DEFER_ACCEPT, which the kernel
// rounds up to its retransmission schedule: 31 s). A silent client waits
// there, in the listener's SYN queue, costing the process nothing. When
// the wait runs out, the kernel hands it over empty, Serve closes it, and
// it connects again. So the wait sets how often each silent client comes
// back through Accept. Under a flood every comeback pushes a probe that
// arrived empty (a SYN cookie, once the queue is full) closer to
// eviction: with the header timeout's 2 s here (3 s once rounded, against
// 31 s), each silent client came back ten times as often, and under the SYN-cookie
// loads of docs/load.md (11 and 12) a probe writing 20 ms late at a
// descriptor limit of 128 was lost far more often. A client
// that writes within 15 s is accepted the moment its bytes arrive, so the
// wait slows no probe. Later than that, a client whose TCP keepalive has
// probed the waiting handshake (Go's dialer does at 15 s) has its bytes
// dropped by the kernel until the wait ends; with the header timeout's
// wait it would have been closed long before it wrote.
const deferAcceptTimeout = 30 * time.Second

// setDeferAccept sets TCP_DEFER_ACCEPT on a listening socket: Accept then
// returns a connection only once its first bytes have arrived, or once it
// has waited deferAcceptTimeout with none. A client that connects and
// stays silent waits in the kernel's queue, costing the process no
// descriptor and no slot, and a probe that is slow to write (a busy
// kubelet) is accepted with its request in hand, never grown old and empty
// in a churning pool. Listen sets it when it binds, so that it covers the
// first connection, and Serve sets it again on a listener made elsewhere.
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

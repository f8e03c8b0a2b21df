package health

import (
	"syscall"
	"time"
)

// setDeferAccept sets TCP_DEFER_ACCEPT on a listening socket: Accept then
// returns a connection only once its first bytes have arrived, or once it
// has waited timeout (rounded up to a second) with none. A client that
// connects and stays silent waits in the kernel's queue, costing the
// process no descriptor and no slot, and a probe that is slow to write (a
// busy kubelet) is accepted with its request in hand, never grown old and
// empty in a churning pool. Listen sets it when it binds, so that it covers
// the first connection, and Serve sets it again on a listener made
// elsewhere. The caller passes the header timeout: past it, net/http would
// close the connection anyway.
func setDeferAccept(rc syscall.RawConn, timeout time.Duration) error {
	seconds := int((timeout + time.Second - 1) / time.Second)
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_DEFER_ACCEPT, seconds)
	}); err != nil {
		return err
	}
	return serr
}

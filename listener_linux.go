package health

import "syscall"

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

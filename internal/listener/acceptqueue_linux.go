package listener

import (
	"net"
	"os"
	"syscall"
	"time"
	"unsafe"
)

// acceptQueued reports whether a connection waits in ln's accept queue,
// waiting up to wait for one to arrive. accept(2) fails for want of a
// descriptor before it looks at its queue, so that failure says nothing
// about whether anyone is connecting: while the rest of the process holds
// every descriptor, Accept would otherwise make room for nobody, every
// time it came round, closing connections that may be probes about to
// speak. Where it cannot tell, it says yes, and Accept makes room as it
// would without asking: when ln is not a socket it can poll, quietly, as
// for a test's listener; when the poll itself fails, with the error, for
// Accept to log.
func acceptQueued(ln net.Listener, wait time.Duration) (bool, error) {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return true, nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true, err
	}
	queued, perr := true, error(nil)
	if err := rc.Control(func(fd uintptr) {
		// ppoll(2): net's RawConn of a listener cannot wait for it to
		// be readable (its Read fails), and syscall has no poll(2).
		pfd := struct {
			fd              int32
			events, revents int16
		}{fd: int32(fd), events: 0x1} // POLLIN
		ts := syscall.NsecToTimespec(int64(max(wait, 0)))
		n, _, errno := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
		queued, perr = queuedAfterPoll(n, errno)
	}); err != nil {
		return true, err
	}
	return queued, perr
}

// queuedAfterPoll reads ppoll's result. On an error, n is -1 as a
// uintptr, not a count. A signal (the runtime preempts goroutines with
// one) ends the wait early with EINTR, which says nothing is queued yet:
// Accept comes round and asks again. Any other error cannot tell, and is
// returned.
func queuedAfterPoll(n uintptr, errno syscall.Errno) (bool, error) {
	switch errno {
	case 0:
		return n > 0, nil
	case syscall.EINTR:
		return false, nil
	default:
		return true, os.NewSyscallError("ppoll", errno)
	}
}

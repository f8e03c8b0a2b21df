package listener

import (
	"net"
	"os"
	"syscall"
	"time"
	"unsafe"
)

// acceptQueued reports whether a connection waits in ln's accept queue,
// waiting up to wait for one. accept(2) fails for want of a descriptor
// before it looks at its queue, so that failure says nothing about whether
// anyone is connecting: while the rest of the process holds every
// descriptor, Accept would otherwise close connections, maybe probes
// about to speak, for nobody. Where it cannot tell, it says yes: quietly
// when ln is not a socket (a test's), with the error when the poll fails.
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

// queuedAfterPoll reads ppoll's result; on an error, n is -1 as a
// uintptr. A signal (the runtime preempts goroutines with one) ends the
// wait early with EINTR: nothing is queued yet, and Accept asks again.
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

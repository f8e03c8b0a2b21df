package listener

import (
	"syscall"
	"unsafe"
)

// soPeekOff is SO_PEEK_OFF, which package syscall does not declare: 42 on
// every architecture Go runs Linux on.
const soPeekOff = 42

// pastUrgentFD is peekPastUrgent's callback. The last peek stopped short
// of the urgent mark, unless the mark was where it started: a peek that
// starts at the mark skips the byte and goes on, as a read does
// (SIOCATMARK tells which). So it peeks again from the offset c.off, the
// mark (SO_PEEK_OFF, for TCP on recent kernels; elsewhere it fails: see
// peeked.awaited), and unsets the offset: the room's next peek is a
// rewound one (waiter.seen).
func (c *connCalls) pastUrgentFD(fd uintptr) bool {
	var atMark int32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.SIOCATMARK, uintptr(unsafe.Pointer(&atMark))); errno != 0 {
		c.err = errno
		return true
	}
	if atMark != 0 {
		return true // nothing past the mark the last peek did not see
	}
	if c.err = setPeekOffset(fd, c.off); c.err != nil {
		return true
	}
	c.n, _, c.err = syscall.Recvfrom(int(fd), c.p, syscall.MSG_PEEK)
	if err := setPeekOffset(fd, -1); err != nil && c.err == nil {
		c.err = err
	}
	return true
}

// setPeekOffset sets fd's SO_PEEK_OFF to off. A test makes it fail, as on
// the older kernels where only unix sockets have the option (socket(7)).
var setPeekOffset = func(fd uintptr, off int) error {
	return syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, soPeekOff, off)
}

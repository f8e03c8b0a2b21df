//go:build unix

package hostile

import (
	"errors"
	"net"
	"syscall"
)

// SendUrgent sends one byte on c as TCP urgent data (MSG_OOB): the
// Urgent client's, and the tests' that place one in a request.
func SendUrgent(c net.Conn) error {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return errors.ErrUnsupported
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Write(func(fd uintptr) bool {
		serr = syscall.Sendto(int(fd), []byte("!"), syscall.MSG_OOB, nil)
		return serr != syscall.EAGAIN
	}); err != nil {
		return err
	}
	return serr
}

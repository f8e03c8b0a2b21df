package listener

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"time"
)

// deferAcceptTimeout is how long the kernel keeps a connection that has
// sent nothing from accept (TCP_DEFER_ACCEPT, rounded up to the SYN-ACK
// retransmissions: about 31 s), costing the process nothing; one that
// writes within it is accepted with its request in hand. A silent client
// comes back once per wait, so the wait sets how often a flood of them
// costs an accept and a close. Without SYN cookies (cookies, the kernel's
// setting) they would fill the SYN queue, and the kubelet's connection
// would be dropped: then accept is not deferred.
const deferAcceptTimeout = 30 * time.Second

func setDeferAccept(fd int, cookies string) error {
	if b, err := os.ReadFile(cookies); err == nil && strings.TrimSpace(string(b)) == "0" {
		return errors.New("SYN cookies are off (" + cookies + " is 0)")
	}
	return syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_DEFER_ACCEPT, int(deferAcceptTimeout/time.Second))
}

// takeSocket returns a descriptor of ln's socket that is the loop's own,
// and closes ln, as Serve owns it, whatever happens. The loop accepts on it with accept4, so that a connection
// never becomes a net.Conn (no netpoller registration, no finalizer), and
// ln's descriptor, closed, leaves the runtime's netpoller, which would
// otherwise wake for every connection.
func takeSocket(ln net.Listener) (int, error) {
	defer ln.Close()
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return -1, fmt.Errorf("%w, not a %T", errNotTCP, ln)
	}
	rc, err := tl.SyscallConn()
	fd, errno := -1, syscall.Errno(0)
	if err == nil {
		err = rc.Control(func(s uintptr) {
			r, _, e := syscall.Syscall(syscall.SYS_FCNTL, s, syscall.F_DUPFD_CLOEXEC, 0)
			fd, errno = int(r), e
		})
	}
	switch {
	case err != nil:
		return -1, err
	case errno != 0:
		return -1, fmt.Errorf("dup: %w", errno)
	}
	// A blocking socket would hang the loop in an accept that a client's
	// reset had emptied.
	if err := syscall.SetNonblock(fd, true); err != nil {
		_ = syscall.Close(fd)
		return -1, err
	}
	return fd, nil
}

// errNotTCP refuses another listener: the loop accepts on a TCP socket.
var errNotTCP = errors.New("the listener must be a *net.TCPListener, as Listen returns")

// watch adds fd to the epoll set, level-triggered, its reports carrying fd
// and gen: what a read leaves is reported again, so no report is lost.
func (l *loop) watch(fd int, gen uint32) error {
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(fd), Pad: int32(gen)}
	return epollFailed(syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_ADD, fd, &ev))
}

func (l *loop) ensureWatched(c *conn) error {
	if c.watched {
		return nil
	}
	c.watched = true
	return l.watch(int(c.fd), c.gen)
}

// epollFailed is a failure of the epoll set itself, which ends Serve:
// without it the loop can watch nothing.
func epollFailed(err error) error {
	if err != nil {
		return fmt.Errorf("the epoll set failed: %w", err)
	}
	return nil
}

func wouldBlock(err error) bool { return err == syscall.EAGAIN || err == syscall.EINTR }

// connList is the held connections, first in, first out.
type connList struct {
	front, back *conn
	len         int
}

func (q *connList) pushBack(c *conn, deadline int64) {
	c.deadline, c.prev, c.next = deadline, q.back, nil
	if q.back != nil {
		q.back.next = c
	} else {
		q.front = c
	}
	q.back = c
	q.len++
}

func (q *connList) remove(c *conn) {
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		q.front = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		q.back = c.prev
	}
	c.prev, c.next = nil, nil
	q.len--
}

package listener

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
)

// watch adds fd to the loop's epoll set, level-triggered, its reports
// carrying fd and gen: what a read leaves is reported again, so one read
// per report is enough, and no report is lost.
func (l *loop) watch(fd int, gen uint32) error {
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(fd), Pad: int32(gen)}
	return epollFailed(syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_ADD, fd, &ev))
}

// listenFor sets which reports of the listening socket the loop takes:
// EPOLLIN, or 0 while accepting is paused.
func (l *loop) listenFor(events uint32) error {
	ev := syscall.EpollEvent{Events: events, Fd: int32(l.lfd)}
	return epollFailed(syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_MOD, l.lfd, &ev))
}

// epollFailed is a failure of the epoll set itself, which ends Serve:
// without it the loop can watch nothing.
func epollFailed(err error) error {
	if err != nil {
		return fmt.Errorf("the epoll set failed: %w", err)
	}
	return nil
}

// wouldBlock reports whether a read found nothing to take yet.
func wouldBlock(err error) bool { return err == syscall.EAGAIN || err == syscall.EINTR }

// takeSocket returns a descriptor of ln's socket that is the loop's own,
// and closes ln. The loop accepts on it with accept4, so that a
// connection never becomes a net.Conn (no netpoller registration, no
// finalizer); and ln's descriptor, closed, leaves the runtime's netpoller,
// which would otherwise wake for each connection accepted.
func takeSocket(ln net.Listener) (int, error) {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return -1, fmt.Errorf("%w (a %T)", errNoDescriptor, ln)
	}
	rc, err := sc.SyscallConn()
	fd, errno := -1, syscall.Errno(0)
	if err == nil {
		err = rc.Control(func(s uintptr) {
			r, _, e := syscall.Syscall(syscall.SYS_FCNTL, s, syscall.F_DUPFD_CLOEXEC, 0)
			fd, errno = int(r), e
		})
	}
	switch {
	case err != nil:
		return -1, fmt.Errorf("%w: %w", errNoDescriptor, err)
	case errno != 0:
		return -1, fmt.Errorf("dup: %w", errno)
	}
	// A socket that blocked would hang the loop in an accept that a
	// client's reset emptied.
	if err := syscall.SetNonblock(fd, true); err != nil {
		_ = syscall.Close(fd)
		return -1, err
	}
	_ = ln.Close()
	return fd, nil
}

// errNoDescriptor is Serve's error for a listener whose socket the loop
// cannot reach.
var errNoDescriptor = errors.New("the listener has no descriptor to accept on; pass the one Listen returns")

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

// waker wakes the loop from ctx's AfterFunc, on another goroutine, with a
// byte through a pipe in the epoll set. Its lock keeps that goroutine from
// writing to a descriptor the loop has closed, and perhaps reused.
type waker struct {
	mu     sync.Mutex
	r, w   int
	opened bool
}

func (w *waker) open() error {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_NONBLOCK|syscall.O_CLOEXEC); err != nil {
		return fmt.Errorf("pipe2: %w", err)
	}
	w.r, w.w, w.opened = p[0], p[1], true
	return nil
}

func (w *waker) wake() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.opened {
		_, _ = syscall.Write(w.w, []byte{0})
	}
}

// clear reads the byte wake wrote, so that the pipe is not reported again.
func (w *waker) clear() {
	var b [1]byte
	_, _ = syscall.Read(w.r, b[:])
}

func (w *waker) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.opened {
		_ = syscall.Close(w.r)
		_ = syscall.Close(w.w)
		w.opened = false
	}
}

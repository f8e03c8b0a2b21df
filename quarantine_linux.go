package health

import (
	"errors"
	"net"
	"os"
	"syscall"
	"time"
)

// readinessPoller is the quarantine's view of its descriptors: an epoll
// set of its own, holding the connections in quarantine (each one-shot: it
// reports once, when its first bytes, its FIN or its reset arrive) and,
// while any is held, the listener (level-triggered: readable while a
// connection waits in the accept queue). The epoll descriptor is itself
// readable whenever the set has an event, so the Go runtime's netpoller
// can wait on it like on a socket: Accept waits for all of them at once,
// with a deadline, without a goroutine or a thread of its own.
type readinessPoller struct {
	file   *os.File // the epoll descriptor, registered with the runtime's netpoller
	rc     syscall.RawConn
	events []syscall.EpollEvent
	fds    []int32 // wait's result, reused
}

// pollerBatch is how many events one wait takes; the rest wait for the next.
const pollerBatch = 64

func newReadinessPoller() (*readinessPoller, error) {
	fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		_ = syscall.Close(fd)
		return nil, os.NewSyscallError("setnonblock", err)
	}
	// A non-blocking descriptor given to os.NewFile is registered with
	// the netpoller; a deadline can be set only if it was.
	f := os.NewFile(uintptr(fd), "health-quarantine-epoll")
	rc, err := f.SyscallConn()
	if err == nil {
		err = f.SetReadDeadline(time.Time{})
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return &readinessPoller{file: f, rc: rc, events: make([]syscall.EpollEvent, pollerBatch), fds: make([]int32, 0, pollerBatch)}, nil
}

// watch adds a held connection: one event, on its first bytes or its end.
func (p *readinessPoller) watch(fd int32) error {
	return p.ctl(syscall.EPOLL_CTL_ADD, fd, syscall.EPOLLIN|syscall.EPOLLRDHUP|syscall.EPOLLONESHOT)
}

// watchListener adds the listener: an event for as long as a connection
// waits to be accepted.
func (p *readinessPoller) watchListener(fd int32) error {
	return p.ctl(syscall.EPOLL_CTL_ADD, fd, syscall.EPOLLIN)
}

// unwatch removes a descriptor. Closing one removes it as well.
func (p *readinessPoller) unwatch(fd int32) error {
	return p.ctl(syscall.EPOLL_CTL_DEL, fd, 0)
}

func (p *readinessPoller) ctl(op int, fd int32, events uint32) error {
	ev := syscall.EpollEvent{Events: events, Fd: fd}
	var err error
	if cerr := p.rc.Control(func(epfd uintptr) { err = syscall.EpollCtl(int(epfd), op, int(fd), &ev) }); cerr != nil {
		return cerr
	}
	return os.NewSyscallError("epoll_ctl", err)
}

// wait returns the descriptors that have an event, waiting for one until
// deadline at most (os.ErrDeadlineExceeded then, with nothing to report).
// The result is valid until the next call.
//
// Once the deadline has passed, the runtime reports it without asking
// epoll, and its timer can fire before the netpoller sees the set
// readable: a held connection that spoke in time would be taken for
// silent and closed. So on a deadline wait asks epoll once more, without
// waiting, and reports what is there.
func (p *readinessPoller) wait(deadline time.Time) ([]int32, error) {
	if err := p.file.SetReadDeadline(deadline); err != nil {
		return nil, err
	}
	var n int
	var err error
	rerr := p.rc.Read(func(epfd uintptr) bool {
		n, err = syscall.EpollWait(int(epfd), p.events, 0)
		// EINTR: return, and let the caller come back.
		return n != 0 || err != nil
	})
	if errors.Is(rerr, os.ErrDeadlineExceeded) {
		if cerr := p.rc.Control(func(epfd uintptr) { n, err = syscall.EpollWait(int(epfd), p.events, 0) }); cerr != nil {
			return nil, cerr
		}
		if n <= 0 && err == nil {
			return nil, rerr
		}
	} else if rerr != nil {
		return nil, rerr
	}
	if err != nil && err != syscall.EINTR {
		return nil, os.NewSyscallError("epoll_wait", err)
	}
	p.fds = p.fds[:0]
	for _, ev := range p.events[:max(n, 0)] {
		p.fds = append(p.fds, ev.Fd)
	}
	return p.fds, nil
}

// close closes the epoll descriptor, which wakes a wait in progress.
func (p *readinessPoller) close() error { return p.file.Close() }

// spoke reports whether anything has arrived on a held connection, without
// consuming it or waiting: bytes, its client's FIN or a reset. When in
// doubt it says yes, and Accept's peek decides.
func spoke(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	var buf [1]byte
	var rerr error
	peek := func(fd uintptr) {
		_, _, rerr = syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	}
	if rc.Control(peek) != nil {
		return true
	}
	return rerr != syscall.EAGAIN
}

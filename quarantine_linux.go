package health

import (
	"net"
	"os"
	"syscall"
)

// readinessPoller is the quarantine's view of its descriptors: an epoll
// set of its own, holding the connections in quarantine, each one-shot: it
// reports once, when its first bytes, its FIN or its reset arrive. Accept
// asks it without waiting (see quarantine.look), so it is never registered
// with the runtime's netpoller; the *os.File keeps the descriptor from
// being closed under a call in progress.
type readinessPoller struct {
	file   *os.File // the epoll descriptor
	rc     syscall.RawConn
	events []syscall.EpollEvent
	ids    []uint64 // poll's result, reused
}

func newReadinessPoller() (*readinessPoller, error) {
	fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	f := os.NewFile(uintptr(fd), "health-quarantine-epoll")
	rc, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return &readinessPoller{file: f, rc: rc, events: make([]syscall.EpollEvent, pollerBatch), ids: make([]uint64, 0, pollerBatch)}, nil
}

// watch adds a held connection's descriptor: one event, on its first
// bytes or its end, reported by id. The event's 64 bits of user data are
// the Fd and Pad fields on every architecture.
func (p *readinessPoller) watch(fd int32, id uint64) error {
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT, Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
	var err error
	if cerr := p.rc.Control(func(epfd uintptr) { err = syscall.EpollCtl(int(epfd), syscall.EPOLL_CTL_ADD, int(fd), &ev) }); cerr != nil {
		return cerr
	}
	return os.NewSyscallError("epoll_ctl", err)
}

// poll returns the ids of the connections that have an event, without
// waiting. The result is valid until the next call.
func (p *readinessPoller) poll() ([]uint64, error) {
	var n int
	var err error
	wait := func(epfd uintptr) {
		for {
			if n, err = syscall.EpollWait(int(epfd), p.events, 0); err != syscall.EINTR {
				return
			}
		}
	}
	if cerr := p.rc.Control(wait); cerr != nil {
		return nil, cerr
	}
	if err != nil {
		return nil, os.NewSyscallError("epoll_wait", err)
	}
	p.ids = p.ids[:0]
	for _, ev := range p.events[:n] {
		p.ids = append(p.ids, uint64(uint32(ev.Fd))|uint64(uint32(ev.Pad))<<32)
	}
	return p.ids, nil
}

// close closes the epoll descriptor.
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

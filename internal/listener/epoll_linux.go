package listener

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// epollSet is the waiting room's epoll set. Its own descriptor is in the
// runtime's netpoller, so the room's goroutine waits there, as a read
// does, not in a system call of its own, with the room's next deadline as
// its read deadline. It is edge-triggered: a peek leaves the bytes it
// looked at in the receive buffer, so a level-triggered set would report
// the socket again at once, for ever, and spin.
type epollSet struct {
	file   *os.File // the epoll descriptor, in the netpoller
	rc     syscall.RawConn
	events []syscall.EpollEvent
	ready  []readyEvent
	n      int   // epollWait's count
	err    error // and error
	waitFn func(fd uintptr) bool
}

const (
	epollET       = 1 << 31 // EPOLLET, which package syscall declares negative
	eventsPerWait = 128     // one wait's reports at most; the next reads more
)

func newEpollSet() (*epollSet, error) {
	fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		_ = syscall.Close(fd)
		return nil, fmt.Errorf("epoll descriptor: %w", err)
	}
	f := os.NewFile(uintptr(fd), "health-waiting-room")
	// Only a descriptor the netpoller took has deadlines; any other would
	// leave the room's goroutine blocked in epoll_wait.
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("epoll descriptor not pollable: %w", err)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("epoll descriptor: %w", err)
	}
	p := &epollSet{file: f, rc: rc, events: make([]syscall.EpollEvent, eventsPerWait), ready: make([]readyEvent, 0, eventsPerWait)}
	p.waitFn = p.epollWait
	return p, nil
}

// watch adds the socket fd to the set, reported by id.
func (p *epollSet) watch(fd int32, id uint64) error {
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLPRI | epollET}
	putID(&ev, id)
	return p.control(syscall.EPOLL_CTL_ADD, fd, &ev)
}

// unwatch removes fd from the set, before net/http reads it: the room
// must not peek at a connection that is no longer its own.
func (p *epollSet) unwatch(fd int32) {
	_ = p.control(syscall.EPOLL_CTL_DEL, fd, nil)
}

func (p *epollSet) control(op int, fd int32, ev *syscall.EpollEvent) error {
	var err error
	if cerr := p.rc.Control(func(epfd uintptr) {
		err = syscall.EpollCtl(int(epfd), op, int(fd), ev)
	}); cerr != nil {
		return cerr
	}
	return err
}

// wait returns the connections reported since the last wait, waiting in
// the netpoller for one if there is none; past the deadline,
// os.ErrDeadlineExceeded. The slice is valid until the next wait.
func (p *epollSet) wait() ([]readyEvent, error) {
	err := p.rc.Read(p.waitFn)
	n := p.n
	if err == nil {
		err = p.err
	}
	p.n, p.err = 0, nil
	if err != nil {
		return nil, err
	}
	p.ready = p.ready[:0]
	for _, ev := range p.events[:n] {
		p.ready = append(p.ready, readyEvent{
			id:     getID(&ev),
			hangup: ev.Events&syscall.EPOLLRDHUP != 0,
			failed: ev.Events&(syscall.EPOLLHUP|syscall.EPOLLERR) != 0,
			urgent: ev.Events&syscall.EPOLLPRI != 0,
		})
	}
	return p.ready, nil
}

// epollWait is wait's callback. It never blocks in the kernel: with
// nothing to report it returns false, and the runtime waits.
func (p *epollSet) epollWait(epfd uintptr) bool {
	for {
		n, err := syscall.EpollWait(int(epfd), p.events, 0)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		p.n, p.err = max(n, 0), err
		return n > 0 || err != nil
	}
}

// setDeadline makes wait return at deadline, as MonotonicNow reads it,
// or never for 0. The time is on MonotonicNow's own clock, so that once
// wait returns, MonotonicNow has reached it.
func (p *epollSet) setDeadline(deadline int64) {
	var t time.Time
	if deadline != 0 {
		t = monotonicBase.Add(time.Duration(deadline - 1))
	}
	_ = p.file.SetReadDeadline(t)
}

func (p *epollSet) close() error { return p.file.Close() }

// putID and getID keep an id in the event's 64 bits of user data, which
// package syscall splits into Fd and Pad.
func putID(ev *syscall.EpollEvent, id uint64) {
	ev.Fd, ev.Pad = int32(uint32(id)), int32(uint32(id>>32))
}

func getID(ev *syscall.EpollEvent) uint64 {
	return uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
}

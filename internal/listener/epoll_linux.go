package listener

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// epollSet is the waiting room's epoll set. The set's own descriptor is
// registered with the runtime's netpoller, so the room's goroutine waits
// in the runtime, as a read does, rather than in a system call of its
// own; its read deadline is the room's next header deadline.
//
// The set is edge-triggered: a peek leaves the bytes it looked at in the
// receive buffer, so a level-triggered set would report the socket again
// at once, for ever, and spin.
type epollSet struct {
	file   *os.File // the epoll descriptor, in the netpoller
	rc     syscall.RawConn
	events []syscall.EpollEvent
	ready  []readyEvent
	n      int   // wait's callback's count
	err    error // and its error
	waitFn func(fd uintptr) bool
}

// readyEvent is the epoll set's report of one connection: its id, whether
// its client has shut its sending side (a FIN), and whether the
// connection has failed (a reset), after which there is no one to answer.
type readyEvent struct {
	id             uint64
	hangup, failed bool
}

// epollET is EPOLLET, which package syscall declares as a negative
// constant.
const epollET = 1 << 31

// eventsPerWait bounds one wait's reports; more are read by the next.
const eventsPerWait = 128

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
	// A deadline can be set only on a descriptor the netpoller took; one
	// it did not would leave the room's goroutine blocked in epoll_wait.
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

// watch adds the socket fd to the set, reported by id: when bytes arrive,
// when its client shuts its side, when it fails.
func (p *epollSet) watch(fd int32, id uint64) error {
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | epollET}
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
// the netpoller for one if there is none. Past the deadline it returns
// os.ErrDeadlineExceeded; once the epollSet is closed, an error. The slice
// is the epoll set's, valid until the next wait.
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
		})
	}
	return p.ready, nil
}

// epollWait is wait's callback. It never blocks in the kernel: with
// nothing to report it returns false, and the runtime waits for the set
// to become readable, or for the deadline.
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

// close closes the set, which ends a wait in progress.
func (p *epollSet) close() error { return p.file.Close() }

// putID and getID keep a connection's id in the event's 64 bits of user
// data, which package syscall splits into Fd and Pad.
func putID(ev *syscall.EpollEvent, id uint64) {
	ev.Fd, ev.Pad = int32(uint32(id)), int32(uint32(id>>32))
}

func getID(ev *syscall.EpollEvent) uint64 {
	return uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
}

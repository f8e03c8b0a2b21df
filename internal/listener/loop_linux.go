package listener

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"syscall"
	"time"
	"unsafe"
)

// serve is Serve on Linux: one loop, on Serve's own goroutine, over an
// epoll set of the listening socket and every connection held. A
// connection costs a descriptor, a small struct and, while its header
// arrives in parts, a buffer of what it has sent; never a goroutine. The
// loop accepts, reads, answers and closes in turn, each step a system call
// that does not wait, so a flood of clients costs it the system calls those
// clients make it do, and a probe waits only behind the connections queued
// before it.
func serve(ctx context.Context, ln net.Listener, opts Options, limit int) error {
	lfd, err := takeSocket(ln)
	if err != nil {
		return err
	}
	l, err := newLoop(lfd, opts, limit)
	if err != nil {
		_ = syscall.Close(lfd)
		return err
	}
	defer l.close()
	serving(&opts, ln, limit)
	stopWaking := context.AfterFunc(ctx, l.wake.wake)
	defer stopWaking()
	return l.run()
}

// loop is serve's state, its goroutine's alone but for wake.
type loop struct {
	opts  Options
	limit int
	lfd   int // the listening socket; -1 once Serve stops accepting
	epfd  int
	wake  waker
	// held is every connection open, in the order of its last change
	// (accept, or its answer): as each stage lasts holdTimeout, that is
	// the order of their deadlines, and the front has been held longest,
	// the one to close to make room.
	held   connList
	byFD   []*conn // held, by descriptor
	gen    uint32  // the last conn's generation
	events []syscall.EpollEvent
	// scratch takes every read: a header that arrives whole, as a probe's
	// does, is answered from here, and only one that arrives in parts is
	// copied to a buffer of its own.
	scratch []byte
	answers *answerWriter
	// resumeAt is when accepting resumes after running out of
	// descriptors with nothing to close (MonotonicNow); 0 when accepting.
	resumeAt       int64
	failed         error // the listening socket's own failure
	fullLog, fdLog logGate
}

// conn is a connection held.
type conn struct {
	fd  int32
	gen uint32 // tells its epoll events from a later conn's on the same descriptor
	// deadline is the end of its current stage (MonotonicNow).
	deadline   int64
	prev, next *conn
	buf        []byte // the header so far, once it arrives in parts
	answered   bool   // held after its answer: what arrives is discarded
	watched    bool   // in the epoll set
}

const (
	// acceptBatch is how many connections one report of the listening
	// socket accepts before the loop turns to the others, so that a
	// crowd connecting cannot starve a connection already held.
	acceptBatch = 64
	// deferAcceptTimeout is how long the kernel keeps a connection that
	// has sent nothing from accept (TCP_DEFER_ACCEPT, rounded up to the
	// SYN-ACK retransmission schedule: about 31 s), costing the process
	// nothing; a client that writes within it is accepted with its request
	// in hand. A silent client comes back once per wait, so the wait sets
	// how often a flood of them costs an accept and a close.
	deferAcceptTimeout = 30 * time.Second
)

// listen binds addr with accept deferred from the first connection on:
// Serve sets it again, for a listener made elsewhere, but a connection
// that arrives before Serve starts would be accepted empty.
func listen(addr string) (net.Listener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var err error
		if cerr := rc.Control(func(fd uintptr) { err = setDeferAccept(fd) }); cerr != nil {
			return cerr
		}
		return err
	}}
	return lc.Listen(context.Background(), "tcp", addr)
}

func setDeferAccept(fd uintptr) error {
	return syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_DEFER_ACCEPT, int(deferAcceptTimeout/time.Second))
}

func newLoop(lfd int, opts Options, limit int) (*loop, error) {
	l := &loop{opts: opts, limit: limit, lfd: lfd, events: make([]syscall.EpollEvent, 128),
		scratch: make([]byte, 64<<10), answers: newAnswerWriter()}
	var err error
	if l.epfd, err = syscall.EpollCreate1(syscall.EPOLL_CLOEXEC); err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	if err = l.wake.open(); err == nil {
		err = l.watch(l.wake.r, 0)
	}
	if err == nil {
		err = l.watch(lfd, 0)
	}
	if err != nil {
		l.close()
		return nil, err
	}
	if err := setDeferAccept(uintptr(lfd)); err != nil {
		opts.Log(slog.LevelWarn, "health: cannot defer accept; silent clients will be accepted at once", "err", err)
	}
	return l, nil
}

// run is the loop: wait for the epoll set's reports or the first
// deadline, act on each, close what is past its deadline. After Serve
// stops accepting it runs until the last connection is closed.
func (l *loop) run() error {
	for l.lfd >= 0 || l.held.front != nil {
		n, err := syscall.EpollWait(l.epfd, l.events, l.waitMillis(MonotonicNow()))
		if err != nil && err != syscall.EINTR {
			return fmt.Errorf("the epoll set failed: epoll_wait: %w", err)
		}
		now := MonotonicNow()
		for _, ev := range l.events[:max(n, 0)] {
			if err := l.handle(ev, now); err != nil {
				return err
			}
		}
		for c := l.held.front; c != nil && c.deadline <= now; c = l.held.front {
			l.drop(c)
		}
		if l.resumeAt != 0 && now >= l.resumeAt && l.lfd >= 0 {
			l.resumeAt = 0
			if err := l.listenFor(syscall.EPOLLIN); err != nil {
				return err
			}
		}
	}
	return l.failed
}

// waitMillis is epoll_wait's timeout: until the first deadline, rounded
// up, so that a wake-up finds it passed; -1, none, when nothing is held.
func (l *loop) waitMillis(now int64) int {
	next := int64(-1)
	if c := l.held.front; c != nil {
		next = c.deadline
	}
	if l.resumeAt != 0 && (next < 0 || l.resumeAt < next) {
		next = l.resumeAt
	}
	if next < 0 {
		return -1
	}
	return int((max(next-now, 0) + int64(time.Millisecond) - 1) / int64(time.Millisecond))
}

// handle acts on one report of the epoll set. Its data is the descriptor
// and, for a connection, its generation: the connection the report is
// about may have been closed earlier in the same batch, and its
// descriptor reused by a later accept.
func (l *loop) handle(ev syscall.EpollEvent, now int64) error {
	fd, gen := int(ev.Fd), uint32(ev.Pad)
	switch {
	case gen != 0:
		if fd < len(l.byFD) && l.byFD[fd] != nil && l.byFD[fd].gen == gen {
			return l.readable(l.byFD[fd], now)
		}
	case fd == l.wake.r:
		l.wake.clear()
		l.stopAccepting()
	case fd == l.lfd:
		return l.accept(now)
	}
	return nil
}

// accept accepts what the listening socket has queued, up to acceptBatch,
// making room for each newcomer when the bound is reached.
func (l *loop) accept(now int64) error {
	for range acceptBatch {
		fd, _, err := syscall.Accept4(l.lfd, syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC)
		switch {
		case err == nil:
		case err == syscall.EAGAIN:
			return nil
		case err == syscall.EMFILE || err == syscall.ENFILE || err == syscall.ENOBUFS || err == syscall.ENOMEM:
			if l.held.len > 0 {
				l.evict(&l.fdLog, "health: out of file descriptors; closing the connections held longest to make room")
				continue
			}
			return l.pauseAccepting(now, err)
		case err == syscall.EBADF || err == syscall.EINVAL || err == syscall.ENOTSOCK || err == syscall.EFAULT:
			l.failed = fmt.Errorf("accept: %w", err)
			l.stopAccepting()
			return nil
		default:
			continue // the network's error for one connection (accept(2)), which it took with it
		}
		l.opts.Counters.Accepted.Add(1)
		if l.held.len >= l.limit {
			l.evict(&l.fullLog, "health: the probe listener is full; closing the connections held longest to make room")
		}
		if err := l.admit(fd, now); err != nil {
			return err
		}
	}
	return nil
}

// admit holds a connection just accepted and reads it at once: after a
// deferred accept its request is there, and a probe is answered and
// closed without ever entering the epoll set.
func (l *loop) admit(fd int, now int64) error {
	l.gen++
	if l.gen == 0 {
		l.gen = 1 // 0 marks the loop's own descriptors
	}
	c := &conn{fd: int32(fd), gen: l.gen}
	for fd >= len(l.byFD) {
		l.byFD = append(l.byFD, nil)
	}
	l.byFD[fd] = c
	l.held.pushBack(c, now+int64(holdTimeout))
	l.opts.Counters.Held.Add(1)
	return l.readable(c, now)
}

// readable reads what has arrived on c, one read: the loop's epoll set is
// level-triggered, so what a read leaves is reported again.
func (l *loop) readable(c *conn, now int64) error {
	if c.answered {
		// Discarded in the kernel, never copied: a body is never read
		// as one.
		n, _, err := syscall.Recvfrom(int(c.fd), l.scratch, syscall.MSG_TRUNC)
		if !wouldBlock(err) && (err != nil || n == 0) {
			l.drop(c) // the client's close, or a reset
		}
		return nil
	}
	n, err := syscall.Read(int(c.fd), l.scratch)
	switch {
	case wouldBlock(err):
		return l.ensureWatched(c)
	case err != nil || n == 0:
		l.drop(c) // closed or reset before its header was whole
		return nil
	}
	seen, head := len(c.buf), l.scratch[:n]
	if seen > 0 {
		c.buf = append(c.buf, head[:min(n, maxHeader+1-seen)]...)
		head = c.buf
	}
	switch end := headerEnd(head[:min(len(head), maxHeader)], seen); {
	case end >= 0:
		return l.respond(c, head[:end], now)
	case len(head) > maxHeader:
		return l.answer(c, []byte(answer431), true, now)
	case seen == 0:
		c.buf = append([]byte(nil), head...)
	}
	return l.ensureWatched(c)
}

// respond answers a whole header: the caller's answer to a well-formed
// request, answer400 to any other.
func (l *loop) respond(c *conn, header []byte, now int64) error {
	req, ok := parseRequest(header)
	if !ok {
		return l.answer(c, []byte(answer400), true, now)
	}
	// The strings are header's bytes, which nothing changes until the
	// AnswerFunc returns, and which it does not keep.
	resp := l.opts.Answer(unsafe.String(unsafe.SliceData(req.method), len(req.method)),
		unsafe.String(unsafe.SliceData(req.path), len(req.path)),
		unsafe.String(unsafe.SliceData(req.rawQuery), len(req.rawQuery)))
	return l.answer(c, l.answers.write(&req, resp, time.Now()), req.mayStillSend, now)
}

// answer writes b to c, then closes it, or, for a client that may still be
// sending, holds it: reading and discarding what arrives, until the client
// closes or holdTimeout has passed since the answer. A close over bytes not
// yet read would be a reset, which can destroy the answer in flight; and a
// FIN sent first would tell a flooding client to reconnect at once. An
// answer is a few hundred bytes into an empty send buffer, so one write
// that does not wait takes it; what a client's window leaves unsent is
// dropped, as a write timeout would drop it.
func (l *loop) answer(c *conn, b []byte, hold bool, now int64) error {
	_, _ = syscall.Write(int(c.fd), b)
	if !hold {
		l.drop(c)
		return nil
	}
	c.answered, c.buf = true, nil
	l.held.remove(c)
	l.held.pushBack(c, now+int64(holdTimeout))
	return l.ensureWatched(c)
}

func (l *loop) ensureWatched(c *conn) error {
	if c.watched {
		return nil
	}
	c.watched = true
	return l.watch(int(c.fd), c.gen)
}

// drop closes c. Its descriptor leaves the epoll set with the close, being
// the socket's only one.
func (l *loop) drop(c *conn) {
	l.held.remove(c)
	l.byFD[c.fd] = nil
	l.opts.Counters.Held.Add(-1)
	_ = syscall.Close(int(c.fd))
}

// evict closes the connection held longest to make room, and logs why,
// at most once a minute.
func (l *loop) evict(gate *logGate, msg string) {
	l.drop(l.held.front)
	l.opts.Counters.countEviction()
	if gate.due(time.Now()) {
		l.opts.Log(slog.LevelWarn, msg, "limit", l.limit)
	}
}

// pauseAccepting stops accepting for descriptorRetry: the connection that
// accept could not take stays queued in the kernel, and the listening
// socket, level-triggered, would be reported again at once, for ever.
func (l *loop) pauseAccepting(now int64, err error) error {
	if l.fdLog.due(time.Now()) {
		l.opts.Log(slog.LevelWarn, "health: out of file descriptors, and no probe connection to close; accepting again shortly", "err", err)
	}
	l.resumeAt = now + int64(descriptorRetry)
	return l.listenFor(0)
}

// stopAccepting closes the listening socket; the connections the kernel
// had queued for it are reset, those held run to their deadlines.
func (l *loop) stopAccepting() {
	if l.lfd >= 0 {
		_ = syscall.Close(l.lfd)
		l.lfd = -1
	}
}

// close releases everything the loop holds: on an error, the connections
// still open too.
func (l *loop) close() {
	for c := l.held.front; c != nil; c = l.held.front {
		l.drop(c)
	}
	l.stopAccepting()
	l.wake.close()
	_ = syscall.Close(l.epfd)
}

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

// serve is Serve on Linux: one loop, on Serve's goroutine, over an epoll
// set of the listening socket and every connection held. Each step is a
// system call that does not wait, so a flood costs the loop the calls its
// clients make, and a probe waits only behind what the kernel queued
// before it. Once ctx is done, the listening socket's reading side is
// shut, and accept fails as for a listener failing on its own, told apart
// by ctx.
func serve(ctx context.Context, ln net.Listener, opts Options, limit int) error {
	lfd, err := takeSocket(ln)
	if err != nil {
		return err
	}
	l := &loop{ctx: ctx, opts: opts, limit: limit, lfd: lfd, epfd: -1, shut: make(chan struct{}),
		events: make([]syscall.EpollEvent, 128), scratch: make([]byte, 64<<10)}
	l.stopShutting = context.AfterFunc(ctx, func() {
		defer close(l.shut)
		_ = syscall.Shutdown(lfd, syscall.SHUT_RD)
	})
	defer l.close()
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return epollFailed(err)
	}
	l.epfd = epfd
	if err := l.watch(lfd, 0); err != nil {
		return err
	}
	if err := setDeferAccept(lfd, "/proc/sys/net/ipv4/tcp_syncookies"); err != nil {
		opts.Log(slog.LevelWarn, "health: cannot defer accept; silent clients will be accepted at once", "err", err)
	}
	serving(&opts, ln, limit)
	return l.run()
}

// loop is serve's state, its goroutine's alone.
type loop struct {
	ctx   context.Context
	opts  Options
	limit int
	lfd   int // the listening socket; -1 once Serve stops accepting
	epfd  int
	// stopShutting cancels ctx's shutdown of lfd, and shut is closed once
	// that has run: lfd closed under it could be another file's by then.
	stopShutting func() bool
	shut         chan struct{}
	// held is every connection open, in the order of its last change
	// (accept, or answer). Each stage lasts holdTimeout, so that is their
	// deadlines' order, and the front, held longest, is the one to close
	// to make room.
	held           connList
	byFD           []*conn // held, by descriptor
	gen            uint32  // the last conn's generation
	events         []syscall.EpollEvent
	scratch        []byte // takes every read: a whole header is answered from here
	encoder        encoder
	failed         error // the listening socket's own failure
	fullLog, fdLog logGate
}

// conn is a connection held.
type conn struct {
	fd         int32
	gen        uint32 // tells its epoll reports from a later conn's on the same descriptor
	deadline   int64  // the end of its current stage (MonotonicNow)
	prev, next *conn
	buf        []byte // the header so far, once it arrives in parts
	answered   bool   // held after its answer: what arrives is discarded
	discarded  int    // bytes discarded since; see maxDiscard
	watched    bool   // in the epoll set
}

const (
	// acceptBatch is how many connections one report of the listening
	// socket accepts, so that a crowd connecting cannot starve those held.
	acceptBatch = 64
	// maxDiscard bounds what a held connection may send: a client that
	// streams a body at loopback speed would cost a read per report for
	// all of holdTimeout.
	maxDiscard = 256 << 10
)

// run waits for the epoll set's reports or the first deadline, acts on
// each, and closes what is past its deadline; once Serve stops accepting,
// until the last connection is closed.
func (l *loop) run() error {
	for l.lfd >= 0 || l.held.front != nil {
		n, err := syscall.EpollWait(l.epfd, l.events, l.waitMillis(MonotonicNow()))
		if err != nil && err != syscall.EINTR {
			return epollFailed(err)
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
	}
	return l.failed
}

// waitMillis is epoll_wait's timeout: to the first deadline, rounded up,
// so that the wake-up finds it passed; -1, none, without one.
func (l *loop) waitMillis(now int64) int {
	if l.held.front == nil {
		return -1
	}
	return int((max(l.held.front.deadline-now, 0) + int64(time.Millisecond) - 1) / int64(time.Millisecond))
}

// handle acts on one report: its descriptor and, for a connection, its
// generation, as the one reported may have been closed earlier in the
// batch, and its descriptor reused by an accept.
func (l *loop) handle(ev syscall.EpollEvent, now int64) error {
	fd, gen := int(ev.Fd), uint32(ev.Pad)
	switch {
	case gen != 0:
		if fd < len(l.byFD) && l.byFD[fd] != nil && l.byFD[fd].gen == gen {
			return l.readable(l.byFD[fd], now)
		}
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
			// Nothing to close and nothing else to serve: only time, and
			// the agent, can free a descriptor. The listening socket
			// still has the connection, and reports it again.
			if l.fdLog.due(time.Now()) {
				l.opts.Log(slog.LevelWarn, "health: out of file descriptors, and no probe connection to close; accepting again shortly", "err", err)
			}
			time.Sleep(descriptorRetry)
			return nil
		case err == syscall.EINVAL || err == syscall.EBADF || err == syscall.ENOTSOCK:
			if l.ctx.Err() == nil {
				l.failed = fmt.Errorf("accept: %w", err)
			}
			l.stopAccepting()
			return nil
		default:
			continue // the network's error for one connection, which it took with it (accept(2))
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
// deferred accept its request is there, and a probe is answered and closed
// without ever entering the epoll set.
func (l *loop) admit(fd int, now int64) error {
	if l.gen++; l.gen == 0 {
		l.gen = 1 // 0 marks the listening socket's reports
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

// readable reads what has arrived on c, one read a report: the epoll set
// is level-triggered, so what a read leaves is reported again.
func (l *loop) readable(c *conn, now int64) error {
	if c.answered { // discarded in the kernel, never copied, never parsed
		n, _, err := syscall.Recvfrom(int(c.fd), l.scratch, syscall.MSG_TRUNC)
		if c.discarded += max(n, 0); !wouldBlock(err) && (err != nil || n == 0) || c.discarded > maxDiscard {
			l.drop(c) // the client's close, a reset, or a stream
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
		return l.send(c, []byte(answer431), true, now)
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
		return l.send(c, []byte(answer400), true, now)
	}
	// The strings are header's bytes, which nothing changes until the
	// AnswerFunc returns, and which it does not keep.
	resp := l.opts.Answer(unsafe.String(unsafe.SliceData(req.method), len(req.method)),
		unsafe.String(unsafe.SliceData(req.path), len(req.path)),
		unsafe.String(unsafe.SliceData(req.rawQuery), len(req.rawQuery)))
	return l.send(c, l.encoder.encode(&req, resp, time.Now()), req.mayStillSend, now)
}

// send writes b to c and closes it, or, for a client that may still be
// sending, holds it, discarding what arrives, until the client closes or
// holdTimeout has passed since the answer: a close over bytes unread would
// be a reset, which can destroy the answer in flight, and a FIN first
// would tell a flooding client to reconnect at once. One send that does
// not wait takes a few hundred bytes into an empty send buffer; what a
// client's window leaves unsent is dropped, as a write timeout would. An
// answer closed at once is sent with MSG_MORE, so that the close's FIN
// leaves in its segment: a packet fewer for each side's kernel.
func (l *loop) send(c *conn, b []byte, hold bool, now int64) error {
	if !hold {
		_ = syscall.Sendto(int(c.fd), b, syscall.MSG_MORE, nil)
		l.drop(c)
		return nil
	}
	_ = syscall.Sendto(int(c.fd), b, 0, nil)
	c.answered, c.buf = true, nil
	l.held.remove(c)
	l.held.pushBack(c, now+int64(holdTimeout))
	return l.ensureWatched(c)
}

// drop closes c; its descriptor, the socket's only one, leaves the epoll
// set with it.
func (l *loop) drop(c *conn) {
	l.held.remove(c)
	l.byFD[c.fd] = nil
	l.opts.Counters.Held.Add(-1)
	_ = syscall.Close(int(c.fd))
}

// evict closes the connection held longest to make room, and says why, at
// most once a minute.
func (l *loop) evict(gate *logGate, msg string) {
	l.drop(l.held.front)
	l.opts.Counters.countEviction()
	if gate.due(time.Now()) {
		l.opts.Log(slog.LevelWarn, msg, "limit", l.limit)
	}
}

// stopAccepting closes the listening socket, once ctx's shutdown of it
// cannot run or has run: the connections the kernel had queued are reset,
// those held run to their deadlines.
func (l *loop) stopAccepting() {
	if l.lfd < 0 {
		return
	}
	if !l.stopShutting() {
		<-l.shut
	}
	_ = syscall.Close(l.lfd)
	l.lfd = -1
}

// close releases everything the loop holds: on an error, the connections
// still open too.
func (l *loop) close() {
	for c := l.held.front; c != nil; c = l.held.front {
		l.drop(c)
	}
	l.stopAccepting()
	if l.epfd >= 0 {
		_ = syscall.Close(l.epfd)
	}
}

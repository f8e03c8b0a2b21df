package listener

import (
	"context"
	"log/slog"
	"net"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshnode/health/internal/probetest"
)

// testLoop is a loop that no goroutine runs, for a test to drive one step
// at a time, with one end of a socket pair held as a connection.
func testLoop(t *testing.T) (l *loop, c *conn, client int) {
	t.Helper()
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Close(epfd) })
	pair, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Close(pair[1]) })
	l = &loop{limit: 10, lfd: -1, epfd: epfd, scratch: make([]byte, 64<<10),
		opts: Options{Answer: func(string, string, string) *Response { return okResponse }, Counters: &Counters{}}}
	require.NoError(t, l.admit(pair[0], MonotonicNow()))
	return l, l.byFD[pair[0]], pair[1]
}

// TestHeaderInPartsKeepsWhatArrived: a header that arrives in parts is
// kept in a buffer of what has arrived, and answered once whole.
func TestHeaderInPartsKeepsWhatArrived(t *testing.T) {
	l, c, client := testLoop(t)
	assert.Nil(t, c.buf, "nothing yet")
	assert.True(t, c.watched)
	sent := ""
	for _, part := range []string{"GET /x HT", "TP/1.1\r\nHo", "st: x\r\n", "\r"} {
		_, err := syscall.Write(client, []byte(part))
		require.NoError(t, err)
		sent += part
		require.NoError(t, l.readable(c, MonotonicNow()))
		assert.Equal(t, sent, string(c.buf))
		assert.LessOrEqual(t, cap(c.buf), 2*len(sent), "a buffer the size of what arrived")
	}
	_, err := syscall.Write(client, []byte("\n"))
	require.NoError(t, err)
	require.NoError(t, l.readable(c, MonotonicNow()))
	assert.Nil(t, l.held.front, "answered and closed")
	answer := make([]byte, 1024)
	n, err := syscall.Read(client, answer)
	require.NoError(t, err)
	assert.Contains(t, string(answer[:n]), "\r\n\r\nok\n")
}

// TestStaleReportIgnored: a report about a connection closed earlier in
// the same batch, whose descriptor a later accept reused, is not taken
// for the new connection's.
func TestStaleReportIgnored(t *testing.T) {
	l, c, client := testLoop(t)
	_, err := syscall.Write(client, []byte(probe))
	require.NoError(t, err)
	require.NoError(t, l.handle(syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: c.fd, Pad: int32(c.gen - 1)}, MonotonicNow()))
	assert.Same(t, c, l.held.front, "not read: the report was the earlier connection's")
	require.NoError(t, l.handle(syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: c.fd, Pad: int32(c.gen)}, MonotonicNow()))
	assert.Nil(t, l.held.front, "its own report: answered")
}

// TestListenerNotTCP: Serve accepts on a TCP socket itself, so another
// listener, or one that hides its socket, is refused at once, saying why,
// and closed, as Serve owns it.
func TestListenerNotTCP(t *testing.T) {
	ln := probetest.Listen(t)
	err := Serve(context.Background(), struct{ net.Listener }{ln}, Options{Counters: &Counters{}, Log: func(_ slog.Level, _ string, _ ...any) {}})
	require.ErrorIs(t, err, errNotTCP)
	assert.Contains(t, err.Error(), "struct { net.Listener }")
	_, err = net.Dial("tcp", ln.Addr().String())
	assert.ErrorIs(t, err, syscall.ECONNREFUSED, "closed")
}

// TestDeferAcceptNeedsSYNCookies: accept is deferred, unless the kernel
// makes no SYN cookies, when silent clients waiting in the SYN queue would
// keep the kubelet's connection out; Serve then says so.
func TestDeferAcceptNeedsSYNCookies(t *testing.T) {
	ln := probetest.Listen(t)
	rc, err := ln.(*net.TCPListener).SyscallConn()
	require.NoError(t, err)
	dir := t.TempDir()
	for setting, deferred := range map[string]int{"1\n": 31, "0\n": 0, "": 31} {
		cookies := dir + "/tcp_syncookies"
		require.NoError(t, os.WriteFile(cookies, []byte(setting), 0o600))
		require.NoError(t, rc.Control(func(fd uintptr) {
			require.NoError(t, syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_DEFER_ACCEPT, 0))
			err = setDeferAccept(int(fd), cookies)
			got, gerr := syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_DEFER_ACCEPT)
			require.NoError(t, gerr)
			assert.Equal(t, deferred, got, "%q", setting)
		}))
		if deferred == 0 {
			assert.ErrorContains(t, err, "SYN cookies are off", "%q", setting)
		} else {
			assert.NoError(t, err, "%q", setting)
		}
	}
}

// TestServeCallsShareTheBudget: Serve calls counting in the same Counters
// hold at most three quarters of the soft descriptor limit between them.
func TestServeCallsShareTheBudget(t *testing.T) {
	limitDescriptors(t, 200)
	var was syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &was))
	counters := &Counters{}
	for range 2 {
		ln, err := Listen("127.0.0.1:0")
		require.NoError(t, err)
		stop := probetest.Start(t, func(ctx context.Context) error {
			return Serve(ctx, ln, Options{Counters: counters, Log: func(slog.Level, string, ...any) {}})
		})
		defer stop()
		probetest.Eventually(t, func() bool { return counters.Limit.Load() > 0 }, "serving")
	}
	probetest.Eventually(t, func() bool { return counters.Limit.Load() == int64(was.Cur*3/4)+1 }, "three quarters, and 1 for the second")
}

// TestEpollFailureEndsServe: a failure of the epoll set itself ends Serve
// with an error, and closes what it held, which it can no longer watch.
func TestEpollFailureEndsServe(t *testing.T) {
	before := epollDescriptors(t)
	s := serveTest(t, 0)
	held := dialSending(t, s.addr, "GET /x HTTP/1.1\r\n")
	probetest.Eventually(t, func() bool { return s.counters.Held.Load() == 1 }, "held")
	var epfd int
	for fd := range epollDescriptors(t) {
		if !before[fd] {
			epfd = fd
		}
	}
	require.NotZero(t, epfd, "Serve's epoll set")
	// Replace it with /dev/null: epoll_wait on the number now fails.
	null, err := os.Open(os.DevNull)
	require.NoError(t, err)
	defer null.Close()
	require.NoError(t, syscall.Dup3(int(null.Fd()), epfd, syscall.O_CLOEXEC))
	dialSending(t, s.addr, probe) // wakes the loop
	err = s.stop()
	require.ErrorContains(t, err, "the epoll set failed")
	assert.True(t, probetest.ClosedWithin(held, time.Second), "closed at once")
	assert.Zero(t, s.counters.Held.Load())
}

// epollDescriptors returns the process's epoll descriptors.
func epollDescriptors(t *testing.T) map[int]bool {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	fds := map[int]bool{}
	for _, e := range entries {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && target == "anon_inode:[eventpoll]" {
			fd, _ := strconv.Atoi(e.Name())
			fds[fd] = true
		}
	}
	return fds
}

// TestOutOfDescriptors: when accept fails for lack of descriptors, Serve
// closes the connection held longest to take the newcomer; holding none,
// it pauses and accepts again once a descriptor is free. Each says so
// once. The clients connect first, silent (deferred accept keeps them in
// the kernel, costing Serve nothing); then the descriptors run short.
func TestOutOfDescriptors(t *testing.T) {
	t.Run("evicts", func(t *testing.T) {
		s := serveTest(t, 0)
		clients := make([]net.Conn, 6)
		for i := range clients {
			clients[i] = dialSending(t, s.addr, "")
		}
		probe1 := dialSending(t, s.addr, "")
		limitDescriptors(t, 2)
		for _, c := range clients {
			_, err := c.Write([]byte("GET /x HTTP/1.1\r\n"))
			require.NoError(t, err)
		}
		probetest.Eventually(t, func() bool { return s.counters.Accepted.Load() == 6 }, "all taken")
		assert.Positive(t, s.counters.Evicted.Load())
		_, err := probe1.Write([]byte(probe))
		require.NoError(t, err)
		assert.Contains(t, readAnswer(t, probe1), "ok\n")
		for _, c := range clients {
			_ = c.Close()
		}
		require.NoError(t, s.stop())
		assert.Equal(t, 1, probetest.Count(s.logs.String(), `msg="health: out of file descriptors; closing the connections held longest to make room"`), s.logs.String())
	})
	t.Run("pauses", func(t *testing.T) {
		s := serveTest(t, 0)
		probe1 := dialSending(t, s.addr, "")
		restore := limitDescriptors(t, 0)
		_, err := probe1.Write([]byte(probe))
		require.NoError(t, err)
		probetest.Eventually(t, func() bool {
			return probetest.Count(s.logs.String(), `msg="health: out of file descriptors, and no probe connection to close; accepting again shortly"`) == 1
		}, "the pause logged")
		restore()
		assert.Contains(t, readAnswer(t, probe1), "ok\n", "accepted once a descriptor is free")
		assert.Zero(t, s.counters.Evicted.Load())
	})
}

// limitDescriptors lowers the soft descriptor limit so that exactly free
// descriptors are left, and returns a function that restores it, which
// the test's end calls too.
func limitDescriptors(t *testing.T, free int) (restore func()) {
	t.Helper()
	var was syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &was))
	// The kernel gives the lowest free number: the limit is the number
	// below which exactly free are unused.
	limit := 0
	for unused := 0; unused < free || isOpen(limit); limit++ {
		if !isOpen(limit) {
			unused++
		}
	}
	limited := was
	limited.Cur = uint64(limit)
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &limited))
	restore = func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &was) }
	t.Cleanup(restore)
	return restore
}

func isOpen(fd int) bool {
	_, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFD, 0)
	return errno == 0
}

// TestProbeCostsOneAllocation: a probe answered at accept costs the loop
// one allocation, its conn (besides accept4's address, which package
// syscall makes): reading, parsing, answering and closing allocate
// nothing.
func TestProbeCostsOneAllocation(t *testing.T) {
	l, _, _ := testLoop(t)
	request := []byte(probe)
	allocs := testing.AllocsPerRun(100, func() {
		pair, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
		require.NoError(t, err)
		_, _ = syscall.Write(pair[1], request)
		require.NoError(t, l.admit(pair[0], MonotonicNow()))
		_ = syscall.Close(pair[1])
	})
	assert.Equal(t, 1.0, allocs)
	assert.Equal(t, 1, l.held.len, "only the test's own connection held")
}

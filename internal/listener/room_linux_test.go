package listener

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshnode/health/internal/probetest"
)

// TestRoomLetsGoOnceTheHeaderIsWhole: a connection waits, holding nothing
// of net/http's, until its header is whole; then a plain probe is
// answered by the short path and a request it does not parse handed to
// net/http.
func TestRoomLetsGoOnceTheHeaderIsWhole(t *testing.T) {
	r := newRoomRig(t, nil, 16)
	c := r.dialWaiting(1)
	assert.Zero(t, r.counters.Held.Load(), "no slot while waiting")
	_, err := io.WriteString(c, "\n")
	require.NoError(t, err)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c)
	require.NoError(t, err)
	assert.Equal(t, fakeNotReady.resp.Body, []byte(got[strings.Index(string(got), "\r\n\r\n")+4:]))
	assert.True(t, strings.HasPrefix(string(got), "HTTP/1.1 503 Service Unavailable\r\n"), "%q", got)
	assert.Equal(t, uint64(1), r.probes.readiness.Load())

	post := r.dial("BREW /readyz HTTP/1.1\r\nHost: x\r\n")
	probetest.Eventually(t, func() bool { return r.waiting() == 1 }, "the BREW waiting")
	_, err = io.WriteString(post, "\r\n")
	require.NoError(t, err)
	select {
	case nc := <-r.handed:
		assert.Equal(t, post.LocalAddr().String(), nc.RemoteAddr().String())
		assert.Equal(t, slotActive, nc.(*limitedConn).state, "a whole request: never evicted")
		r.release(nc)
	case <-time.After(10 * time.Second):
		t.Fatal("the whole BREW never reached net/http")
	}
	assert.Zero(t, r.waiting())
	assert.Equal(t, uint64(2), r.counters.Accepted.Load())
	assert.Zero(t, r.counters.Evicted.Load())
}

// TestRoomHeaderDeadline: a connection whose header is not whole 2 s after
// its accept is closed then, not before, cleanly, and not counted as an
// eviction; as is one accepted empty (where accept is not deferred, or a
// SYN cookie). (What a header cut off mid-line gets is
// TestPartialHeadersAsNetHTTP's.)
func TestRoomHeaderDeadline(t *testing.T) {
	for _, tc := range []struct{ name, send string }{
		{"whole lines of a header", probeRequest[:len(probeRequest)-2]},
		{"nothing", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Without its descriptor, the limiter cannot defer accept:
			// an empty connection is accepted at once.
			r := newRoomRig(t, probetest.HideDescriptor(probetest.Listen(t)), 16)
			start := time.Now() // before the accept, so before the deadline's start
			c := r.dial(tc.send)
			probetest.Eventually(t, func() bool { return r.waiting() == 1 }, "the connection waiting")
			require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
			got, err := io.ReadAll(c)
			require.NoError(t, err, "a clean close (a FIN), as net/http's, never a reset over the unread header")
			assert.Empty(t, got)
			elapsed := time.Since(start)
			assert.GreaterOrEqual(t, elapsed, headerTimeout, "closed before its deadline")
			assert.Less(t, elapsed, headerTimeout+time.Second, "closed long after its deadline")
			assert.Zero(t, r.waiting())
			assert.Zero(t, r.counters.Evicted.Load(), "a deadline is no eviction")
			assert.Empty(t, r.logs.String())
		})
	}
}

// TestRoomFullClosesTheOldest: one more connection than the room holds
// closes the one that has waited longest, an eviction, logged once.
func TestRoomFullClosesTheOldest(t *testing.T) {
	r := newRoomRig(t, nil, 3)
	var conns []net.Conn
	for i := range 3 {
		conns = append(conns, r.dialWaiting(i+1))
	}
	for i := range 2 {
		conns = append(conns, r.dial(partialProbe))
		assert.True(t, probetest.ClosedByServer(conns[i]), "the oldest, %d, closed", i)
		probetest.Eventually(t, func() bool { return r.counters.Evicted.Load() == uint64(i+1) }, "the eviction counted")
		assert.Equal(t, 3, r.waiting())
	}
	_, err := io.WriteString(conns[2], "\n")
	require.NoError(t, err)
	assert.True(t, probetest.ClosedByServer(conns[2]))
	assert.Equal(t, uint64(1), r.probes.readiness.Load(), "the third still waited, and was answered")
	assert.Equal(t, 1, probetest.Count(r.logs.String(), `level=WARN msg="health: waiting room full; closing the connections that have waited longest" waiting=3`), r.logs.String())
	assert.NotZero(t, r.counters.LastEviction.Load())
}

// TestRoomClientGoes: a client that resets, or shuts its side after part
// of a header, is dealt with in the room at once: the reset closed,
// whatever its receive queue still holds, and the shut-down one answered
// net/http's 400 (see TestRoomHalfClosedAsNetHTTP); neither handed to
// net/http, neither evicted.
func TestRoomClientGoes(t *testing.T) {
	r := newRoomRig(t, nil, 16)
	c := r.dialWaiting(1)
	require.NoError(t, c.(*net.TCPConn).SetLinger(0))
	require.NoError(t, c.Close()) // a reset
	probetest.Eventually(t, func() bool { return r.waiting() == 0 }, "the reset connection closed")

	c = r.dialWaiting(1)
	require.NoError(t, c.(*net.TCPConn).CloseWrite())
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c)
	require.NoError(t, err)
	assert.Equal(t, response400, string(got))
	// The room's goroutine hands on right after a drop, before it looks
	// at the next report: had it handed either on, it would be queued.
	select {
	case nc := <-r.handed:
		t.Errorf("a connection was handed to net/http")
		r.release(nc)
	default:
	}
	assert.Zero(t, r.waiting())
	assert.Zero(t, r.counters.Evicted.Load())
	assert.Equal(t, uint64(2), r.counters.Accepted.Load())
}

// TestRoomHalfClosedAsNetHTTP: part of a header, then the client's FIN,
// gets from Serve what it gets from net/http.
func TestRoomHalfClosedAsNetHTTP(t *testing.T) {
	s := serveTest(t, nil, Options{})
	s.probes.ready.Store(false)
	refAddr := serveReference(t, new(fakeProbes), nil) // not ready, as s
	want := halfClosed(t, refAddr)
	require.True(t, strings.HasPrefix(want, "HTTP/1.1 400 Bad Request\r\n"), "net/http answers 400: %q", want)
	assert.Equal(t, want, halfClosed(t, s.addr))
}

// halfClosed sends part of a header to addr, shuts its sending side, and
// returns the answer.
func halfClosed(t *testing.T, addr string) string {
	c, err := net.Dial("tcp", addr)
	if !assert.NoError(t, err) {
		return ""
	}
	defer c.Close()
	_, err = io.WriteString(c, partialProbe)
	assert.NoError(t, err)
	assert.NoError(t, c.(*net.TCPConn).CloseWrite())
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, _ := io.ReadAll(c)
	return string(got)
}

// TestRoomHalfClosedBurstIsNoFlood: clients that send part of a header and
// shut their sending side, many more at once than there are slots, each
// get net/http's 400, and none is evicted: net/http answers each at once,
// so its slot is an answering one, not one that waits.
func TestRoomHalfClosedBurstIsNoFlood(t *testing.T) {
	s := serveTest(t, nil, Options{Limit: 2})
	want := halfClosed(t, serveReference(t, new(fakeProbes), nil))
	const clients = 64
	answers := make(chan string, clients)
	for range clients {
		go func() { answers <- halfClosed(t, s.addr) }()
	}
	for range clients {
		assert.Equal(t, want, <-answers)
	}
	assert.Zero(t, s.counters.Evicted.Load(), "none evicted as waiting")
	assert.Equal(t, uint64(clients), s.counters.Accepted.Load())
}

// TestRoomIgnoresStaleReports: the epoll set may report a connection after
// the room has let it go, by then perhaps closed and its descriptor
// number reused by a newer one. Ids are never reused, so the report finds
// nothing, and the newer connection is left alone.
func TestRoomIgnoresStaleReports(t *testing.T) {
	r := newRoomRig(t, nil, 16)
	r.dialWaiting(1)
	r.l.room.mu.Lock()
	old := *r.l.room.waiting.front()
	r.l.room.mu.Unlock()
	require.True(t, r.l.room.closeOldest())
	newer := r.dialWaiting(1)
	r.l.room.mu.Lock()
	current := *r.l.room.waiting.front()
	r.l.room.mu.Unlock()
	assert.NotEqual(t, old.id, current.id)
	t.Logf("descriptors: evicted %d, newer %d", old.fd, current.fd)

	r.l.room.examine(readyEvent{id: old.id, hangup: true})
	assert.Equal(t, 1, r.waiting(), "the newer connection still waits")
	r.l.room.examine(readyEvent{id: current.id}) // spurious: nothing new arrived
	assert.Equal(t, 1, r.waiting(), "an incomplete header stays")
	_, err := io.WriteString(newer, "\n")
	require.NoError(t, err)
	assert.True(t, probetest.ClosedByServer(newer))
	assert.Equal(t, uint64(1), r.probes.readiness.Load(), "answered")
}

// TestRoomHoldsAFullCrowd is the attack: 4,096 clients each one
// byte short of a header. All wait, none is evicted, and a probe is
// answered meanwhile; one more evicts the oldest; then each client's last
// byte gets it its answer. The goroutines the crowd costs are the room's
// and the accepting one's, not one a client.
func TestRoomHoldsAFullCrowd(t *testing.T) {
	floodTest(t)
	const crowd = maxWaiting
	before := runtime.NumGoroutine()
	r := newRoomRig(t, nil, crowd)
	conns := dialAll(t, r.addr, crowd, partialProbe)
	probetest.Eventually(t, func() bool { return r.waiting() == crowd }, "the whole crowd waiting")
	assert.LessOrEqual(t, runtime.NumGoroutine()-before, 4, "goroutines for the crowd")
	assert.Zero(t, r.counters.Evicted.Load())

	status, _, err := probetest.KubeletProbe(r.addr, "/healthz")
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, status, "a whole probe never waits behind the crowd")

	conns = append(conns, r.dial(partialProbe)) // one more: the oldest goes
	probetest.Eventually(t, func() bool { return r.counters.Evicted.Load() == 1 }, "the eviction counted")
	for _, c := range conns {
		_, _ = io.WriteString(c, "\n") // the evicted one may refuse it
	}
	unanswered := 0
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		got, _ := io.ReadAll(c)
		if !strings.HasPrefix(string(got), "HTTP/1.1 503 ") {
			unanswered++
		}
	}
	assert.Equal(t, 1, unanswered, "the one evicted")
	assert.Equal(t, uint64(crowd), r.probes.readiness.Load())
	assert.Equal(t, uint64(1), r.counters.Evicted.Load())
}

// TestNoRoomWithoutEpoll: where the room cannot be made, Serve says so and
// holds what waits in its slots, evicting the oldest, as outside Linux.
func TestNoRoomWithoutEpoll(t *testing.T) {
	makeEpollSet = func() (*epollSet, error) { return nil, errNoEpoll }
	defer func() { makeEpollSet = newEpollSet }()
	s := serveTest(t, nil, Options{Limit: 2})
	for range 4 {
		dialStalled(t, s.addr)
	}
	probetest.Eventually(t, func() bool { return s.counters.Evicted.Load() > 0 }, "the slots evicting")
	assertProbesAnswered(t, s.addr, 2)
	log := s.logs.String()
	assert.Equal(t, 1, probetest.Count(log, `level=WARN msg="health: cannot make the waiting room; connections without a whole request will wait in connection slots, evicted under a flood" err="no epoll here"`), log)
}

var errNoEpoll = errors.New("no epoll here")

// TestWaitingCrowdKernelMemory measures what a full waiting room costs the
// kernel, which charges it to the agent's memory cgroup: the slab memory
// (/proc/meminfo's Slab: sockets, their inodes, epoll entries) and the
// receive buffers (/proc/net/sockstat's TCP mem) that 4,096 connections
// one byte short of a header add. Both ends are in this process, so the
// figure is for a pair; the server's end is most of it, since it alone
// holds bytes. Run it with -v for the figure; it fails past 32 KiB a
// pair, the sign of kernel buffers grown per connection. Slab is the
// whole machine's, so its other work moves the figure a little.
func TestWaitingCrowdKernelMemory(t *testing.T) {
	floodTest(t)
	r := newRoomRig(t, nil, maxWaiting)
	before := kernelMemory(t)
	conns := make([]net.Conn, 0, maxWaiting)
	t.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
	})
	for range maxWaiting {
		c, err := net.Dial("tcp", r.addr)
		require.NoError(t, err)
		conns = append(conns, c)
		_, err = io.WriteString(c, partialProbe)
		require.NoError(t, err)
	}
	probetest.Eventually(t, func() bool { return r.waiting() == maxWaiting }, "the whole crowd waiting")
	perPair := (kernelMemory(t) - before) / maxWaiting
	t.Logf("%d waiting connections: %.1f MiB of kernel memory, %d bytes a connection (both ends)", maxWaiting, float64(perPair*maxWaiting)/(1<<20), perPair)
	assert.Less(t, perPair, int64(32<<10))
}

// kernelMemory is the slab memory and the TCP receive and send buffers in
// use, in bytes.
func kernelMemory(t *testing.T) int64 {
	t.Helper()
	meminfo, err := os.ReadFile("/proc/meminfo")
	require.NoError(t, err)
	sockstat, err := os.ReadFile("/proc/net/sockstat")
	require.NoError(t, err)
	var slabKiB, tcpPages int64
	for _, line := range strings.Split(string(meminfo), "\n") {
		if v, ok := strings.CutPrefix(line, "Slab:"); ok {
			slabKiB, err = strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			require.NoError(t, err)
		}
	}
	for _, line := range strings.Split(string(sockstat), "\n") {
		if rest, ok := strings.CutPrefix(line, "TCP: "); ok {
			f := strings.Fields(rest)
			for i := 0; i+1 < len(f); i += 2 {
				if f[i] == "mem" {
					tcpPages, err = strconv.ParseInt(f[i+1], 10, 64)
					require.NoError(t, err)
				}
			}
		}
	}
	return slabKiB<<10 + tcpPages*int64(os.Getpagesize())
}

// TestRoomFailureHandsOnWhatWaits: an epoll set that fails gives up the room,
// with one ERROR line; what waited goes to net/http rather than being
// closed, and so does every later connection without a whole header.
func TestRoomFailureHandsOnWhatWaits(t *testing.T) {
	failing := make(chan struct{})
	makeEpollSet = func() (*epollSet, error) {
		p, err := newEpollSet()
		if err != nil {
			return nil, err
		}
		inner := p.waitFn
		p.waitFn = func(epfd uintptr) bool {
			select {
			case <-failing:
				p.err = syscall.EIO
				return true
			default:
				return inner(epfd)
			}
		}
		return p, nil
	}
	defer func() { makeEpollSet = newEpollSet }()
	r := newRoomRig(t, nil, 8)
	clients := []net.Conn{r.dialWaiting(1), r.dialWaiting(2)}
	close(failing)
	clients = append(clients, r.dial(partialProbe)) // wakes the epoll set, which fails
	later := r.dial(partialProbe)
	var handed []net.Conn
	for range 4 {
		select {
		case nc := <-r.handed:
			handed = append(handed, nc)
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of 4 connections handed on within 10 s; log: %s", len(handed), r.logs.String())
		}
	}
	defer func() {
		for _, nc := range handed {
			r.release(nc)
		}
	}()
	for _, c := range append(clients, later) {
		_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		assert.ErrorIs(t, err, os.ErrDeadlineExceeded, "still open")
	}
	for _, nc := range handed {
		_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		got := make([]byte, len(partialProbe))
		_, err := io.ReadFull(nc, got)
		require.NoError(t, err)
		assert.Equal(t, partialProbe, string(got), "what the client wrote, for net/http to read")
	}
	r.dial(partialProbe)
	select {
	case nc := <-r.handed:
		handed = append(handed, nc)
	case <-time.After(10 * time.Second):
		t.Fatal("a connection after the failure not handed on within 10 s")
	}
	assert.Zero(t, r.waiting(), "the room takes no more")
	assert.Zero(t, r.counters.Evicted.Load())
	log := r.logs.String()
	assert.Equal(t, 1, probetest.Count(log, `level=ERROR msg="health: the waiting room failed; connections without a whole request will wait in connection slots, evicted under a flood" err="input/output error"`), log)
}

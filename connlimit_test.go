package health

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshnode/health/internal/hostile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConnLimit(t *testing.T) {
	for _, tc := range []struct {
		soft uint64
		want int
	}{
		{0, 256}, // unknown
		{1, 1},
		{4, 1},
		{64, 16},
		{128, 32},
		{1023, 255},
		{1024, 256},
		{1 << 20, 256},
		{1<<64 - 1, 256}, // unlimited
	} {
		assert.Equal(t, tc.want, connLimit(tc.soft), "soft limit %d", tc.soft)
	}
}

// dialStalled opens a connection that sends part of a request and stops.
func dialStalled(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	_, err = io.WriteString(c, "GET /readyz HTTP/1.1\r\nHost: x\r\n")
	require.NoError(t, err)
	return c
}

// serveReadyLimited serves a Server with every latch set and a bound of
// limit connections, and returns it with its address and its log.
func serveReadyLimited(t *testing.T, limit int) (*Server, string, *logBuffer) {
	t.Helper()
	s, logs, ln := listenReady(t)
	addr, _ := startServingOn(t, ln, func(ctx context.Context, ln net.Listener) error { return s.serve(ctx, ln, limit) })
	return s, addr, logs
}

// listenReady returns a Server with every latch set, its log, and the
// listener Listen made for it, for a test to wrap before serving.
func listenReady(t *testing.T) (*Server, *logBuffer, net.Listener) {
	t.Helper()
	s, logs := newTestServer(t)
	s.SetRegistered()
	s.SetDataPlaneReady()
	ln, err := s.Listen()
	require.NoError(t, err)
	return s, logs, ln
}

// assertProbesAnswered sends n kubelet probes, alternating endpoints, and
// expects each to be answered 200 ok.
func assertProbesAnswered(t *testing.T, addr string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		path := []string{"/healthz", "/readyz"}[i%2]
		status, body, err := kubeletProbe(addr, path)
		require.NoError(t, err, "probe %d of %s", i, path)
		assert.Equal(t, 200, status, "probe %d of %s", i, path)
		assert.Equal(t, "ok\n", body, "probe %d of %s", i, path)
	}
}

// stalled is a client that sends part of a request and waits; idle, one
// that sends nothing.
var (
	stalled = hostile.Client{Name: "stalled", Request: "GET /healthz HTTP/1.1\r\nHost: x\r\n"}
	idle    = hostile.Client{Name: "idle"}
)

// floodTest skips a flood under -short: the fast loop leaves the floods,
// seconds of real time and both cores each, to the full suite.
func floodTest(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("a flood: skipped with -short")
	}
}

// flood runs n clients of one kind, each reconnecting as soon as it is
// done, until the returned stop is called. Every loop is bounded in count,
// and every connection by a deadline.
func flood(t *testing.T, addr string, n int, client hostile.Client) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop) // before the server's cleanup, which was registered first
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 5000 && ctx.Err() == nil; j++ {
				c, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", addr)
				if err != nil {
					continue
				}
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				client.Run(ctx, c)
				_ = c.Close()
			}
		}()
	}
	return stop
}

// TestHostileClientsCannotCostAProbe floods a server whose every slot is
// wanted, kind by kind, with clients that reconnect as soon as they are
// closed, and probes while they do: each probe must be answered. A state
// that held a slot for long (a body net/http waits for, or the 500 ms it
// lingers after refusing a request) would queue the probe in the kernel
// behind the flood, 128 clients deep for 4 slots.
func TestHostileClientsCannotCostAProbe(t *testing.T) {
	floodTest(t)
	for _, hc := range hostile.Clients() {
		t.Run(hc.Name, func(t *testing.T) { floodAndProbe(t, hc, 4, 128, 6) })
	}
}

// floodAndProbe serves a bound of limit, floods it with clients of one
// kind, and sends probes while they run: every probe is answered, every
// slot is released once the flood ends, and nothing is logged as an error.
func floodAndProbe(t *testing.T, client hostile.Client, limit, clients, probes int) {
	s, addr, logs := serveReadyLimited(t, limit)
	stop := flood(t, addr, clients, client)
	if client.Request != "" {
		// Probes answered before the flood holds every slot would prove
		// nothing. (A silent client is not accepted at all while the
		// kernel defers it, so there is nothing to wait for.)
		eventually(t, func() bool { return s.conns.accepted.Load() >= uint64(2*limit) }, "the flood arriving")
	}
	assertProbesAnswered(t, addr, probes)
	stop()
	eventually(t, func() bool { return s.conns.held.Load() == 0 }, "every slot released")
	assert.Equal(t, 0, logs.count("level=ERROR"), logs.String())
}

// TestHostileMix runs every kind of client at once, connect-and-close churn
// among them. The probes are answered throughout, and once the
// flood ends Serve holds nothing and still answers.
func TestHostileMix(t *testing.T) {
	floodTest(t)
	s, addr, logs := serveReadyLimited(t, 8)
	var stops []func()
	for _, hc := range hostile.Clients() {
		n := 16
		if hc.Loops() {
			n = 2 // each a loop as fast as a core runs it
		}
		stops = append(stops, flood(t, addr, n, hc))
	}
	eventually(t, func() bool { return s.conns.evicted.Load() > 0 }, "the flood evicting")
	assertProbesAnswered(t, addr, 10)
	for _, stop := range stops {
		stop()
	}
	eventually(t, func() bool { return s.conns.held.Load() == 0 }, "Serve holds no connection")
	assertProbesAnswered(t, addr, 2)
	assert.Equal(t, 1, logs.count("connection slots full"), "logged once, not per eviction")
	assert.Equal(t, 0, logs.count("level=ERROR"), logs.String())
}

// countingListener counts the sockets it has accepted and not yet closed,
// and notes whenever Accept is called while limit of them are open: one
// more would exceed the bound. With outOfFDsAt > 0, Accept fails as the
// system does when descriptors run out once that many are open.
type countingListener struct {
	net.Listener
	limit, outOfFDsAt int

	mu                sync.Mutex
	open, overLimit   int
	outOfFDs, maxOpen int
}

func (l *countingListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if l.open >= l.limit {
		l.overLimit++
	}
	if l.outOfFDsAt > 0 && l.open >= l.outOfFDsAt {
		l.outOfFDs++
		l.mu.Unlock()
		return nil, outOfDescriptorsError()
	}
	l.mu.Unlock()
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open++
	l.maxOpen = max(l.maxOpen, l.open)
	return &countedConn{Conn: c, l: l}, nil
}

// SyscallConn lets Serve defer accept on the socket, as on Listen's, and
// Accept ask whether a connection waits when it runs out of descriptors
// (acceptQueued).
func (l *countingListener) SyscallConn() (syscall.RawConn, error) {
	return l.Listener.(syscall.Conn).SyscallConn()
}

func (l *countingListener) counts() (maxOpen, overLimit, outOfFDs int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.maxOpen, l.overLimit, l.outOfFDs
}

// outOfDescriptorsError is accept's error when the process has no
// descriptor left.
func outOfDescriptorsError() error {
	return &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
}

type countedConn struct {
	net.Conn
	l    *countingListener
	once sync.Once
}

// SyscallConn lets Serve peek at the request, as on an accepted TCP
// connection.
func (c *countedConn) SyscallConn() (syscall.RawConn, error) {
	return c.Conn.(syscall.Conn).SyscallConn()
}

func (c *countedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.open--
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// TestBoundNeverExceeded floods a bound of 2 with complete requests, which
// are answered rather than evicted, so that every slot is often busy when
// the next client arrives: Accept must wait for room before it takes the
// socket, never after.
func TestBoundNeverExceeded(t *testing.T) {
	floodTest(t)
	s, _, ln := listenReady(t)
	const limit = 2
	counting := &countingListener{Listener: ln, limit: limit}
	addr, _ := startServingOn(t, counting, func(ctx context.Context, ln net.Listener) error { return s.serve(ctx, ln, limit) })

	stopComplete := flood(t, addr, 32, hostile.Client{Name: "complete", Request: "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"})
	stopStalled := flood(t, addr, 32, stalled)
	eventually(t, func() bool { return s.conns.evicted.Load() > 0 }, "the flood evicting")
	assertProbesAnswered(t, addr, 10)
	stopComplete()
	stopStalled()
	maxOpen, overLimit, _ := counting.counts()
	assert.Equal(t, limit, maxOpen, "sockets held at once")
	assert.Zero(t, overLimit, "times Accept was called with every slot's socket open")
}

// TestStatusUnderFlood reads Serve's connection counters through Status
// during and after a flood of stalled clients: Evicted grows, Pressure is
// on, Held never passes Limit, and once the flood ends Held returns to 0.
func TestStatusUnderFlood(t *testing.T) {
	floodTest(t)
	s, addr, _ := serveReadyLimited(t, 8)
	stop := flood(t, addr, 64, stalled)
	// Probes answered before the flood takes every slot would prove
	// nothing, and leave Evicted at 0.
	eventually(t, func() bool { return s.Status().Conns.Evicted > 0 }, "the flood evicting")
	assertProbesAnswered(t, addr, 4)
	during := s.Status().Conns
	stop()
	assert.Equal(t, 8, during.Limit)
	assert.LessOrEqual(t, during.Held, during.Limit)
	assert.Positive(t, during.Evicted)
	assert.Greater(t, during.Accepted, during.Evicted)
	assert.True(t, during.Pressure)
	eventually(t, func() bool { return s.Status().Conns.Held == 0 }, "Held returns to 0")
	after := s.Status().Conns
	assert.GreaterOrEqual(t, after.Evicted, during.Evicted)
	assert.GreaterOrEqual(t, after.Accepted, during.Accepted)
	// Read once nothing moves: the four probes were accepted and answered.
	assert.GreaterOrEqual(t, after.Accepted, after.Evicted+4)
}

// TestLimiterEvictionOrder drives the limiter without net/http, so that no
// timeout closes anything and every close is the limiter's: it evicts the
// connection that has waited longest without a request, never one being
// answered and never the one admitted last, and logs the flood once.
func TestLimiterEvictionOrder(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	logs := &logBuffer{}
	var counters connCounters
	const limit = 8 // reserve 1: eviction starts at 7 live connections
	l := newConnLimiter(ln, limit, &counters, slogTo(logs).Log)
	defer l.Close()

	state := func(c *limitedConn) slotState {
		l.mu.Lock()
		defer l.mu.Unlock()
		return c.state
	}
	// net/http's hooks, as its connection goroutines would call them.
	hook := func(c *limitedConn, s http.ConnState) { l.trackState(c, s) }
	var held []*limitedConn
	// accept takes the next connection, then ends the goroutines of those
	// the limiter evicted, as net/http's would.
	accept := func() *limitedConn {
		t.Helper()
		client, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { _ = client.Close() })
		_, err = io.WriteString(client, "GET /readyz HTTP/1.1\r\nHost: x\r\n")
		require.NoError(t, err)
		nc, err := l.Accept()
		require.NoError(t, err)
		c := nc.(*limitedConn)
		kept := held[:0]
		for _, h := range append(held, c) {
			if state(h) == slotEvicted {
				hook(h, http.StateClosed)
			} else {
				kept = append(kept, h)
			}
		}
		held = kept
		return c
	}

	var conns []*limitedConn
	for i := 0; i < limit-1; i++ {
		conns = append(conns, accept())
	}
	require.Zero(t, counters.evicted.Load())
	hook(conns[0], http.StateActive) // its request is being answered

	// From here each Accept evicts the oldest waiting connection first.
	for i := 1; i <= 4; i++ {
		conns = append(conns, accept())
		assert.Equal(t, slotReleased, state(conns[i]), "conn %d, the oldest waiting, evicted", i)
		assert.Equal(t, slotWaiting, state(conns[i+1]), "conn %d kept", i+1)
	}
	assert.Equal(t, slotActive, state(conns[0]), "a connection being answered is never evicted")
	assert.Equal(t, uint64(4), counters.evicted.Load())
	assert.LessOrEqual(t, counters.held.Load(), int64(limit))

	assert.Equal(t, 1, logs.count(`msg="health: connection slots full; closing the oldest connections that have not sent a request" slots=8`), "logged once, not per eviction")
}

// TestLimiterSparesTheNewest fills a bound of 2 with a connection being
// answered and a newcomer whose goroutine may not have read its request
// yet: Accept waits for a slot rather than evict the newcomer.
func TestLimiterSparesTheNewest(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var counters connCounters
	l := newConnLimiter(ln, 2, &counters, discardLogger().Log)
	defer l.Close()
	dial := func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		_, err = io.WriteString(c, "GET /readyz HTTP/1.1\r\nHost: x\r\n")
		require.NoError(t, err)
	}
	accept := func() *limitedConn {
		nc, err := l.Accept()
		require.NoError(t, err)
		return nc.(*limitedConn)
	}
	dial()
	answering := accept()
	l.trackState(answering, http.StateActive)
	dial()
	newest := accept()

	accepted := make(chan net.Conn, 1)
	go func() {
		nc, _ := l.Accept()
		accepted <- nc
	}()
	dial()
	l.trackState(answering, http.StateClosed) // its goroutine ends: a slot frees
	newcomer := <-accepted
	require.NotNil(t, newcomer)
	defer newcomer.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	assert.Equal(t, slotWaiting, newest.state, "the newest was not evicted")
	assert.Zero(t, counters.evicted.Load())
}

// TestStatusAddsUpOverServeCalls serves one Server on two listeners, as an
// agent serving 127.0.0.1 and [::1] would: Held and Limit add up over the
// running Serve calls, and Limit goes when they return.
func TestStatusAddsUpOverServeCalls(t *testing.T) {
	s, _ := newTestServer(t)
	addr8, stop8 := startServingLimited(t, s, 8)
	addr4, stop4 := startServingLimited(t, s, 4)
	dialStalled(t, addr8)
	dialStalled(t, addr8)
	dialStalled(t, addr4)
	eventually(t, func() bool { return s.Status().Conns.Held == 3 }, "three held over two Serve calls")
	assert.Equal(t, 12, s.Status().Conns.Limit)
	require.NoError(t, stop8())
	require.NoError(t, stop4())
	assert.Equal(t, ConnStatus{Accepted: 3}, s.Status().Conns)
}

// TestEmptyWaitingFollowsTheSlots: the count of slots waiting for a
// request that had not begun when they were admitted (which decides
// crowded) follows every way a connection enters and leaves the waiting
// list, once each: admitted empty, begun or complete; its request read,
// twice; evicted; its goroutine ending, twice; shutdown; admitted while
// closing. A count that drifted up would hold every empty newcomer apart
// for good, one that drifted down never.
func TestEmptyWaitingFollowsTheSlots(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := newConnLimiter(ln, 8, &connCounters{}, discardLogger().Log)
	defer l.Close()
	admit := func(p peeked) *limitedConn {
		a, b := net.Pipe()
		t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
		return l.admit(a, p).(*limitedConn)
	}
	check := func(want int, step string) {
		t.Helper()
		l.mu.Lock()
		defer l.mu.Unlock()
		empty := 0
		for c := l.waiting.front(); c != nil; c = c.next {
			if c.empty {
				empty++
			}
		}
		assert.Equal(t, want, l.emptyWaiting, step)
		assert.Equal(t, empty, l.emptyWaiting, "%s: the count and the list agree", step)
	}
	evictOldest := func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		require.NotNil(t, l.evictOldest(true))
	}

	a := admit(peekedEmpty)
	check(1, "admitted empty")
	admit(peekedIncomplete)
	check(1, "admitted with its request begun")
	admit(peekedComplete)
	check(1, "admitted complete")
	l.trackState(a, http.StateActive)
	check(0, "its request read")
	l.trackState(a, http.StateActive)
	check(0, "read again")

	e := admit(peekedEmpty)
	check(1, "another admitted empty")
	evictOldest() // b, the oldest waiting
	check(1, "the begun one evicted")
	evictOldest() // e
	check(0, "the empty one evicted")
	l.trackState(e, http.StateClosed)
	l.trackState(e, http.StateClosed)
	check(0, "its goroutine ended, reported twice")

	f := admit(peekedEmpty)
	check(1, "admitted empty")
	l.trackState(f, http.StateClosed)
	check(0, "its goroutine ended while it waited")

	admit(peekedEmpty)
	admit(peekedEmpty)
	check(2, "two admitted empty")
	l.shutdown()
	check(0, "shut down")
	admit(peekedEmpty)
	check(0, "admitted while closing")
}

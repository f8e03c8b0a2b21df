package health

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
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

// The ways a client can hold a connection, or the goroutine serving it,
// without being a probe. net/http itself holds several of them: it reads a
// body after answering, answers OPTIONS * only once the body is in, and
// sleeps half a second before closing after an oversized header or a large
// body it will not read.
var hostileClients = []struct {
	name      string
	request   string
	closeSend bool // half-close once the request is written
	reset     bool // reset the connection once the request is written
}{
	{"OPTIONS * with a body that never comes", "OPTIONS * HTTP/1.1\r\nHost: x\r\nContent-Length: 4096\r\n\r\n", false, false},
	{"a 12 KiB header", "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 12<<10) + "\r\n\r\n", false, false},
	{"a 1 TiB body declared", "POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1099511627776\r\n\r\n", false, false},
	{"a small body that never comes", "POST /readyz HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n", false, false},
	{"Expect: 100-continue, body never sent", "PUT /readyz HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 1000\r\n\r\n", false, false},
	// net/http answers 417 itself, then waits for the body.
	{"another Expect, body never sent", "GET /readyz HTTP/1.1\r\nHost: x\r\nExpect: x\r\nContent-Length: 1000\r\n\r\n", false, false},
	// Since Go 1.27, net/http answers 431 itself past 500 values, then
	// lingers.
	{"501 header lines", "GET /healthz HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("a:\r\n", 501) + "\r\n", false, false},
	// The answer cannot be written: net/http would linger on the body.
	{"a small body, then a reset", "POST /readyz HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n", false, true},
	{"a 1 TiB body declared, then a reset", "POST /readyz HTTP/1.1\r\nHost: x\r\nContent-Length: 1099511627776\r\n\r\n", false, true},
	{"501 trailer names", "POST /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTrailer: " + strings.Repeat("a,", 500) + "a\r\n\r\n", false, false},
	{"a chunked body never finished", "POST /readyz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", false, false},
	{"pipelined requests", strings.Repeat("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 3), false, false},
	{"half-closed mid-header", "GET /healthz HTTP/1.1\r\nHost: x\r\n", true, false},
	{"a TLS ClientHello", "\x16\x03\x01\x00\xc8\x01\x00\x00\xc4\x03\x03" + strings.Repeat("\x5a", 32) + "\x00\x00\x02\x13\x01\x01\x00", false, false},
	{"the HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", false, false},
	{"slowloris", "GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n", false, false},
	{"idle", "", false, false},
}

// flood runs n clients that each send request, then read until the server
// closes the connection, and reconnect at once, until the returned stop is
// called. Every loop is bounded in count, and every connection by a
// deadline.
func flood(t *testing.T, addr string, n int, request string, closeSend, reset bool) (stop func()) {
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
				hostileOnce(ctx, addr, request, closeSend, reset)
			}
		}()
	}
	return stop
}

func hostileOnce(ctx context.Context, addr, request string, closeSend, reset bool) {
	c, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	if request != "" {
		// The server may close before all of it is written.
		if _, err := io.WriteString(c, request); err != nil {
			return
		}
	}
	if reset {
		_ = c.(*net.TCPConn).SetLinger(0)
		return // the deferred Close resets
	}
	if closeSend {
		_ = c.(*net.TCPConn).CloseWrite()
	}
	_, _ = io.Copy(io.Discard, c)
}

// TestHostileClientsCannotCostAProbe floods a server whose every slot is
// wanted, kind by kind, with clients that reconnect as soon as they are
// closed, and probes while they do: each probe must be answered. A state
// that held a slot for long (a body net/http waits for, or the 500 ms it
// lingers after refusing a request) would queue the probe in the kernel
// behind the flood, 128 clients deep for 4 slots.
func TestHostileClientsCannotCostAProbe(t *testing.T) {
	for _, hc := range hostileClients {
		t.Run(hc.name, func(t *testing.T) { floodAndProbe(t, hc.request, hc.closeSend, hc.reset, 4, 128, 6) })
	}
}

// floodAndProbe serves a bound of limit, floods it with clients of one
// kind, and sends probes while they run: every probe is answered, every
// slot is released once the flood ends, and nothing is logged as an error.
func floodAndProbe(t *testing.T, request string, closeSend, reset bool, limit, clients, probes int) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the server's cleanup
	s, addr, logs := serveReadyLimited(t, limit)
	stop := flood(t, addr, clients, request, closeSend, reset)
	assertProbesAnswered(t, addr, probes)
	stop()
	eventually(t, func() bool { return s.conns.held.Load() == 0 }, "every slot released")
	assert.Equal(t, 0, logs.count("level=ERROR"), logs.String())
}

// TestNothingLingers floods a bound of a single connection, which is never
// evicted while it is the newest, with requests that net/http would hold
// after reading them, reading or waiting for a body, or sleeping 500 ms
// before it closes. Each held slot would queue the probe behind every
// client, 16 deep; answered and closed at once, none does.
func TestNothingLingers(t *testing.T) {
	for _, hc := range hostileClients[:11] {
		t.Run(hc.name, func(t *testing.T) { floodAndProbe(t, hc.request, hc.closeSend, hc.reset, 1, 16, 4) })
	}
}

// TestHostileMix runs every kind of client at once, and connect-and-close
// churn beside them. The probes are answered throughout, and once the
// flood ends Serve holds nothing and still answers.
func TestHostileMix(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the server's cleanup
	s, addr, logs := serveReadyLimited(t, 8)
	var stops []func()
	for _, hc := range hostileClients {
		stops = append(stops, flood(t, addr, 16, hc.request, hc.closeSend, hc.reset))
	}
	stops = append(stops, flood(t, addr, 2, "", true, false)) // connect, half-close, go
	assertProbesAnswered(t, addr, 10)
	for _, stop := range stops {
		stop()
	}
	eventually(t, func() bool { return s.conns.held.Load() == 0 }, "Serve holds no connection")
	assertProbesAnswered(t, addr, 2)
	assert.Equal(t, 1, logs.count("connection slots full"), "logged once, not per eviction")
	assert.Equal(t, 0, logs.count("level=ERROR"), logs.String())
}

// TestOversizedHeaderAnswered431 checks that the header cap still answers
// as net/http does, now that the limiter refuses the bytes before net/http
// sees too many of them: the same bytes, and the connection closed.
func TestOversizedHeaderAnswered431(t *testing.T) {
	t.Run("refused at accept", func(t *testing.T) { testOversizedHeader(t, func(ln net.Listener) net.Listener { return ln }) })
	// Without a socket to peek at, the limit on reads refuses it.
	t.Run("refused on read", func(t *testing.T) {
		testOversizedHeader(t, func(ln net.Listener) net.Listener { return opaqueListener{ln} })
	})
}

// opaqueListener hides the socket of its connections, as a listener made
// by other means than Listen may.
type opaqueListener struct{ net.Listener }

func (l opaqueListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return struct{ net.Conn }{c}, nil
}

func testOversizedHeader(t *testing.T, wrap func(net.Listener) net.Listener) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the server's cleanup
	s, _, ln := listenReady(t)
	addr, _ := startServingOn(t, wrap(ln), func(ctx context.Context, ln net.Listener) error { return s.Serve(ctx, ln) })
	for _, size := range []int{maxRequestBytes, 9 << 10, 64 << 10} {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		head := "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: "
		_, err = io.WriteString(c, head+strings.Repeat("a", size-len(head)))
		require.NoError(t, err)
		got, _ := io.ReadAll(c) // a reset may follow the answer: the rest is unread
		_ = c.Close()
		assert.Equal(t, response431, string(got), "size %d", size)
	}
	// One byte under the cap is a request like any other.
	head := "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: "
	got := exchange(t, addr, head+strings.Repeat("a", maxRequestBytes-len(head)-5)+"\r\n\r\n")
	assert.True(t, strings.HasPrefix(got, "HTTP/1.1 200 OK\r\n"), "%.40q", got)

	// Lines: the request line, Host, n headers and the blank line.
	withLines := func(n int) string {
		return "GET /healthz HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("a: 1\r\n", n-3) + "\r\n"
	}
	got = exchange(t, addr, withLines(maxHeaderLines))
	assert.True(t, strings.HasPrefix(got, "HTTP/1.1 200 OK\r\n"), "%.40q", got)
	for _, lines := range []int{maxHeaderLines + 1, 501, 1000} {
		assert.Equal(t, response431, exchange(t, addr, withLines(lines)), "%d lines", lines)
	}
	// What follows the header, a body or pipelined requests, is not the
	// header's: those lines do not count.
	for _, tc := range []struct{ raw, status string }{
		{"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + strings.Repeat("\n", 100), "405"},
		{strings.Repeat("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 30), "200"},
		{withLines(maxHeaderLines) + "\n", "200"},
	} {
		got := exchange(t, addr, tc.raw)
		assert.True(t, strings.HasPrefix(got, "HTTP/1.1 "+tc.status+" "), "%.30q: %.40q", tc.raw, got)
	}
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

// SyscallConn lets Serve defer accept on the socket, as on Listen's.
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
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the server's cleanup
	s, _, ln := listenReady(t)
	const limit = 2
	counting := &countingListener{Listener: ln, limit: limit}
	addr, _ := startServingOn(t, counting, func(ctx context.Context, ln net.Listener) error { return s.serve(ctx, ln, limit) })

	stopComplete := flood(t, addr, 32, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", false, false)
	stopStalled := flood(t, addr, 32, "GET /healthz HTTP/1.1\r\nHost: x\r\n", false, false)
	assertProbesAnswered(t, addr, 10)
	stopComplete()
	stopStalled()
	maxOpen, overLimit, _ := counting.counts()
	assert.Equal(t, limit, maxOpen, "sockets held at once")
	assert.Zero(t, overLimit, "times Accept was called with every slot's socket open")
}

// TestUndrainedBodiesAreClosedAtOnce checks that a request with a body is
// answered and its connection closed without waiting for the body: left to
// net/http, each would hold its slot, unevictable, for the read timeout.
func TestUndrainedBodiesAreClosedAtOnce(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	s, addr, _ := serveReadyLimited(t, 4)
	for i := 0; i < 8; i++ {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		_, err = io.WriteString(c, "POST /readyz HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
		require.NoError(t, err)
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err, "client %d", i)
		_ = resp.Body.Close()
		assert.Equal(t, 405, resp.StatusCode, "client %d", i)
		assertClosedByServer(t, c, "client %d", i)
		_ = c.Close()
	}
	eventually(t, func() bool { return s.conns.held.Load() == 0 }, "every slot released")
	assert.Zero(t, s.conns.evicted.Load(), "closed by the server after the answer, not evicted")
}

// TestStatusUnderFlood reads Serve's connection counters through Status
// during and after a flood of stalled clients: Evicted grows, Pressure is
// on, Held never passes Limit, and once the flood ends Held returns to 0.
func TestStatusUnderFlood(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the server's cleanup
	s, addr, _ := serveReadyLimited(t, 8)
	stop := flood(t, addr, 64, "GET /healthz HTTP/1.1\r\nHost: x\r\n", false, false)
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
	l := newConnLimiter(ln, limit, &counters, slogTo(logs))
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
	l := newConnLimiter(ln, 2, &counters, discardLogger())
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
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the servers' cleanup
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

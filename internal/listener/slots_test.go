package listener

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshnode/health/internal/hostile"
	"github.com/meshnode/health/internal/probetest"
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
		assert.Equal(t, tc.want, limitFor(tc.soft), "soft limit %d", tc.soft)
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

// rooms are the waiting rooms a flood test runs with: Linux's, of its
// full size and small enough to fill, and none, as elsewhere, where the
// slots hold what waits.
var rooms = []struct {
	name string
	size int
}{{"room", 0}, {"small room", 16}, {"no room", -1}}

// assertProbesAnswered sends n kubelet probes, alternating endpoints, and
// expects each to be answered 200 ok.
func assertProbesAnswered(t *testing.T, addr string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		path := []string{"/healthz", "/readyz"}[i%2]
		status, body, err := probetest.KubeletProbe(addr, path)
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

// TestSlotHeaderTimeout: where no room holds what waits (outside Linux),
// a connection with half a request waits in its slot, and net/http's
// header timeout, 2 s from accept, closes it unanswered, not before and
// at most a second after, and frees the slot.
func TestSlotHeaderTimeout(t *testing.T) {
	s := serveTest(t, nil, Options{Limit: 8, room: -1})
	start := time.Now() // before the accept, which the request's first byte brings
	got := probetest.Exchange(t, s.addr, "GET /readyz HTTP/1.1\r\nHost: x\r\n", headerTimeout+time.Second)
	elapsed := time.Since(start)
	assert.Empty(t, got, "closed unanswered")
	assert.GreaterOrEqual(t, elapsed, headerTimeout, "closed before the header timeout")
	probetest.Eventually(t, func() bool { return s.counters.Held.Load() == 0 }, "the slot freed")
	assert.Zero(t, s.counters.Evicted.Load(), "a timeout is no eviction")
	assert.Zero(t, s.probes.answered())
}

// TestHostileClientsCannotCostAProbe floods a server whose every slot is
// wanted, kind by kind, with clients that reconnect as soon as they are
// closed, and probes while they do: each probe must be answered. A state
// that held a slot for long (a body net/http waits for, or the 500 ms it
// lingers after refusing a request) would queue the probe in the kernel
// behind the flood, 128 clients deep for 4 slots.
func TestHostileClientsCannotCostAProbe(t *testing.T) {
	floodTest(t)
	for _, room := range rooms {
		for _, hc := range hostile.Clients() {
			t.Run(room.name+"/"+hc.Name, func(t *testing.T) { floodAndProbe(t, hc, 4, room.size, 128, 6, 0) })
		}
	}
}

// slotProbe is a probe that net/http answers, not the short path (its
// lines end in a bare LF), so it waits for a slot where a kubelet's
// probe, answered at accept, may not.
const slotProbe = "GET /healthz HTTP/1.1\nHost: x\n\n"

// floodAndProbe serves a bound of limit, floods it with clients of one
// kind, and sends probes while they run, then as many slotProbes: every
// probe is answered, every slot is released once the flood ends, and
// nothing is logged as an error.
func floodAndProbe(t *testing.T, client hostile.Client, limit, room, clients, probes, slotProbes int) {
	s := serveTest(t, nil, Options{Limit: limit, room: room})
	stop := flood(t, s.addr, clients, client)
	if client.Request != "" {
		// Probes answered before the flood holds every slot would prove
		// nothing. (A silent client is not accepted at all while the
		// kernel defers it, so there is nothing to wait for.)
		probetest.Eventually(t, func() bool { return s.counters.Accepted.Load() >= uint64(2*limit) }, "the flood arriving")
	}
	assertProbesAnswered(t, s.addr, probes)
	for i := range slotProbes {
		// The kubelet's 5 s: a probe it would not have waited for fails.
		got := probetest.Exchange(t, s.addr, slotProbe, 5*time.Second)
		assert.True(t, strings.HasPrefix(got, "HTTP/1.1 200 OK\r\n") && strings.HasSuffix(got, "\r\n\r\nok\n"), "slot probe %d: %q", i, got)
	}
	stop()
	probetest.Eventually(t, func() bool { return s.counters.Held.Load() == 0 }, "every slot released")
	assert.Zero(t, probetest.Count(s.logs.String(), "level=ERROR"), s.logs.String())
}

// TestHostileMix runs every kind of client at once, connect-and-close churn
// among them, against a room small enough to fill and against none. The
// probes are answered throughout, the one that fills logs it once, and
// once the flood ends Serve holds nothing and still answers.
func TestHostileMix(t *testing.T) {
	floodTest(t)
	for _, tc := range []struct {
		name string
		room int
		full string
	}{
		{"small room", 16, `msg="health: waiting room full; closing the connections that have waited longest" waiting=16`},
		{"no room", -1, `msg="health: connection slots full; closing the oldest connections that have not sent a request" limit=8`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.room > 0 && !hasRoom() {
				t.Skip("no waiting room on this OS")
			}
			s := serveTest(t, nil, Options{Limit: 8, room: tc.room})
			var stops []func()
			for _, hc := range hostile.Clients() {
				n := 16
				if hc.Loops() {
					n = 2 // each a loop as fast as a core runs it
				}
				stops = append(stops, flood(t, s.addr, n, hc))
			}
			probetest.Eventually(t, func() bool { return s.counters.Evicted.Load() > 0 }, "the flood evicting")
			assertProbesAnswered(t, s.addr, 10)
			for _, stop := range stops {
				stop()
			}
			probetest.Eventually(t, func() bool { return s.counters.Held.Load() == 0 }, "Serve holds no connection")
			assertProbesAnswered(t, s.addr, 2)
			log := s.logs.String()
			assert.Equal(t, 1, probetest.Count(log, tc.full), "logged once, not per eviction:\n%s", log)
			assert.Zero(t, probetest.Count(log, "level=ERROR"), log)
		})
	}
}

// TestBoundNeverExceeded floods a bound of 2 with complete requests, which
// are answered rather than evicted, so that every slot is often busy when
// the next client arrives: Accept must wait for room before it takes the
// socket, never after.
func TestBoundNeverExceeded(t *testing.T) {
	floodTest(t)
	ln, err := Listen("127.0.0.1:0")
	require.NoError(t, err)
	const limit = 2
	counting := probetest.NewListener(ln, probetest.Faults{Limit: limit})
	s := serveTest(t, counting, Options{Limit: limit, room: -1})

	// POST is no plain probe: net/http answers it, in a slot.
	stopComplete := flood(t, s.addr, 32, hostile.Client{Name: "complete", Request: "POST /healthz HTTP/1.1\r\nHost: x\r\n\r\n"})
	stopStalled := flood(t, s.addr, 32, stalled)
	probetest.Eventually(t, func() bool { return s.counters.Evicted.Load() > 0 }, "the flood evicting")
	assertProbesAnswered(t, s.addr, 10)
	stopComplete()
	stopStalled()
	counts := counting.Counts()
	assert.Equal(t, limit, counts.MaxOpen, "sockets held at once")
	assert.Zero(t, counts.OverLimit, "times Accept was called with every slot's socket open")
}

// TestStatusUnderFlood reads Serve's counters during and after a flood of
// stalled clients in the slots: Evicted grows, an eviction's time is kept, Held never passes Limit, and once the flood ends Held returns to 0.
func TestStatusUnderFlood(t *testing.T) {
	floodTest(t)
	s := serveTest(t, nil, Options{Limit: 8, room: -1})
	stop := flood(t, s.addr, 64, stalled)
	// Probes answered before the flood takes every slot would prove
	// nothing, and leave Evicted at 0.
	probetest.Eventually(t, func() bool { return s.counters.Evicted.Load() > 0 }, "the flood evicting")
	assertProbesAnswered(t, s.addr, 4)
	held, evicted, accepted := s.counters.Held.Load(), s.counters.Evicted.Load(), s.counters.Accepted.Load()
	stop()
	assert.Equal(t, int64(8), s.counters.Limit.Load())
	assert.LessOrEqual(t, held, int64(8))
	assert.Greater(t, accepted, evicted)
	assert.NotZero(t, s.counters.LastEviction.Load())
	probetest.Eventually(t, func() bool { return s.counters.Held.Load() == 0 }, "Held returns to 0")
	// Read once nothing moves: the four probes were accepted and answered.
	assert.GreaterOrEqual(t, s.counters.Accepted.Load(), s.counters.Evicted.Load()+4)
}

// TestLimiterEvictionOrder drives the limiter without net/http, so that no
// timeout closes anything and every close is the limiter's: it evicts the
// connection that has waited longest without a request, never one being
// answered and never the one admitted last, and logs the flood once.
func TestLimiterEvictionOrder(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	logs := new(probetest.LogBuffer)
	var counters Counters
	const limit = 8 // reserve 1: eviction starts at 7 live connections
	l := newConnLimiter(ln, limit, Options{Counters: &counters, Log: logTo(logs), room: -1})
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
	require.Zero(t, counters.Evicted.Load())
	hook(conns[0], http.StateActive) // its request is being answered

	// From here each Accept evicts the oldest waiting connection first.
	for i := 1; i <= 4; i++ {
		conns = append(conns, accept())
		assert.Equal(t, slotReleased, state(conns[i]), "conn %d, the oldest waiting, evicted", i)
		assert.Equal(t, slotWaiting, state(conns[i+1]), "conn %d kept", i+1)
	}
	assert.Equal(t, slotActive, state(conns[0]), "a connection being answered is never evicted")
	assert.Equal(t, uint64(4), counters.Evicted.Load())
	assert.LessOrEqual(t, counters.Held.Load(), int64(limit))

	assert.Equal(t, 1, probetest.Count(logs.String(), `msg="health: connection slots full; closing the oldest connections that have not sent a request" limit=8`), "logged once, not per eviction")
}

// TestLimiterSparesTheNewest fills a bound of 2 with a connection being
// answered and a newcomer whose goroutine may not have read its request
// yet: Accept waits for a slot rather than evict the newcomer.
func TestLimiterSparesTheNewest(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var counters Counters
	l := newConnLimiter(ln, 2, Options{Counters: &counters, Log: discardLog, room: -1})
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
	assert.Zero(t, counters.Evicted.Load())
}

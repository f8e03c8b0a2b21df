package health

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

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

// TestStalledConnectionsCannotCostAProbe fills every connection slot with
// stalled half-sent requests, holds more than that open, and then probes
// over TCP: every probe must be answered. Which connections are evicted is
// TestLimiterEvictionOrder's subject: here the header timeout would close
// the stalled ones too, so their closing proves nothing about the order.
func TestStalledConnectionsCannotCostAProbe(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the server's cleanup
	addr := serveReady(t)

	const extra, probes = 40, 40
	for i := 0; i < maxConns-closingReserve+extra; i++ {
		dialStalled(t, addr)
	}
	for i := 0; i < probes; i++ {
		path := []string{"/healthz", "/readyz"}[i%2]
		status, body, err := kubeletProbe(addr, path)
		require.NoError(t, err, "probe %d", i)
		assert.Equal(t, 200, status, "probe %d", i)
		assert.Equal(t, "ok\n", body, "probe %d", i)
	}
}

// TestLimiterEvictionOrder drives the limiter without net/http, so that no
// timeout closes anything and every close is the limiter's: stalled
// connections are evicted oldest first, an answered one before any of
// them, a complete request and the newcomer never; the bound holds; and
// the onset of pressure is logged once.
func TestLimiterEvictionOrder(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	logs := &logBuffer{}
	l := newConnLimiter(ln, slog.New(slog.NewTextHandler(logs, nil)))
	defer l.Close()

	state := func(c *limitedConn) slotState {
		l.mu.Lock()
		defer l.mu.Unlock()
		return c.state
	}
	var held []*limitedConn
	// accept takes the next connection, then ends the goroutines of those
	// the limiter evicted, as net/http's would.
	accept := func(request string) *limitedConn {
		t.Helper()
		client, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { _ = client.Close() })
		_, err = io.WriteString(client, request)
		require.NoError(t, err)
		nc, err := l.Accept()
		require.NoError(t, err)
		c := nc.(*limitedConn)
		kept := held[:0]
		for _, h := range append(held, c) {
			if state(h) == connEvicted {
				l.connState(h, http.StateClosed)
			} else {
				kept = append(kept, h)
			}
		}
		held = kept
		return c
	}
	const stalledRequest = "GET /readyz HTTP/1.1\r\nHost: x\r\n"
	const fullRequest = "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n"

	threshold := maxConns - closingReserve
	var stalled []*limitedConn
	for i := 0; i < threshold; i++ {
		stalled = append(stalled, accept(stalledRequest))
	}
	require.Equal(t, 0, logs.count("connection slots full"))

	// Past the threshold, each newcomer evicts the oldest stalled one.
	for i := 0; i < 10; i++ {
		newcomer := accept(stalledRequest)
		assert.Equal(t, connReleased, state(stalled[i]), "stalled %d evicted", i)
		assert.Equal(t, connWaiting, state(stalled[i+1]), "stalled %d kept", i+1)
		assert.Equal(t, connWaiting, state(newcomer), "never the newcomer")
	}
	assert.Equal(t, 1, logs.count(`msg="health: connection slots full; closing the oldest connections that have not sent a request" slots=256`))

	// Under pressure a complete request is seen at accept and protected,
	// even once it is the oldest of all.
	complete := accept(fullRequest)
	assert.Equal(t, connComplete, state(complete))
	// An answered connection goes before the oldest stalled one.
	_, err = stalled[20].Write([]byte("HTTP/1.1 200 OK\r\n\r\n"))
	require.NoError(t, err)
	accept(stalledRequest)
	assert.Equal(t, connReleased, state(stalled[20]), "the answered one is evicted first")
	assert.Equal(t, connWaiting, state(stalled[11]), "the oldest stalled one is kept this time")
	for i := 0; i < threshold; i++ {
		accept(stalledRequest)
	}
	assert.Equal(t, connComplete, state(complete), "a complete request is never evicted")
	l.mu.Lock()
	assert.LessOrEqual(t, l.held, maxConns)
	assert.Equal(t, threshold, l.held-l.evicted)
	l.mu.Unlock()
	assert.Equal(t, 1, logs.count("connection slots full"), "logged once, not per eviction")
}

// TestSlowProbeSurvivesChurn is load 4 in miniature: a probe whose request
// comes late, after many newer connections have churned through a full
// pool. Under pressure the kernel keeps the silent probe connection until
// its request arrives, so it is never the oldest waiting connection in the
// pool; a limiter that accepted it at once would have evicted it.
func TestSlowProbeSurvivesChurn(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("deferred accept is Linux's TCP_DEFER_ACCEPT")
	}
	t.Cleanup(func() { goleak.VerifyNone(t) })
	addr := serveReady(t)

	// One past the eviction threshold: the oldest is evicted, and the
	// limiter is under pressure.
	first := make([]net.Conn, maxConns-closingReserve+1)
	for i := range first {
		first[i] = dialStalled(t, addr)
	}
	assertClosedByServer(t, first[0], "the first eviction")

	probe, err := net.Dial("tcp", addr) // handshake done, request not yet sent
	require.NoError(t, err)
	defer probe.Close()

	// Churn: each newcomer evicts the oldest waiting connection, so the
	// whole first batch goes, and then the oldest of the churn itself. Had
	// the probe been accepted when it connected, it would have been among
	// the victims. This has to happen within deferAcceptSeconds, after
	// which the kernel hands the silent probe over anyway; it takes a small
	// fraction of that.
	const extra = 16
	churn := make([]net.Conn, len(first)-1+extra)
	for i := range churn {
		churn[i] = dialStalled(t, addr)
	}
	assertClosedByServer(t, churn[extra-1], "the churn's last eviction")

	_, err = io.WriteString(probe, "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	_ = probe.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(probe)
	require.NoError(t, err, "%q", got)
	assert.True(t, strings.HasPrefix(string(got), "HTTP/1.1 200 OK\r\n"), "%q", got)
	assert.True(t, strings.HasSuffix(string(got), "\r\n\r\nok\n"), "%q", got)
}

// TestUndrainedBodiesCannotCostAProbe fills every slot with requests that
// are answered at once but whose declared bodies never come: net/http holds
// each one for its read timeout, draining the body after the answer.
// Answered connections are evicted first, so every newcomer, drainer or
// probe, gets its answer; were they protected, a full pool would have to
// evict newer connections before their requests had been read.
func TestUndrainedBodiesCannotCostAProbe(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	addr := serveReady(t)

	var drainers []net.Conn
	for i := 0; i < maxConns; i++ {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer c.Close()
		_, err = io.WriteString(c, "POST /readyz HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
		require.NoError(t, err)
		drainers = append(drainers, c)
	}
	// Every drainer is answered (405) before its body would be read.
	for i, c := range drainers {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err, "drainer %d", i)
		_ = resp.Body.Close()
		require.Equal(t, 405, resp.StatusCode, "drainer %d", i)
	}
	for i := 0; i < 20; i++ {
		status, body, err := kubeletProbe(addr, "/readyz")
		require.NoError(t, err, "probe %d", i)
		assert.Equal(t, 200, status, "probe %d", i)
		assert.Equal(t, "ok\n", body, "probe %d", i)
	}
	assertClosedByServer(t, drainers[0], "the oldest answered connection was evicted")
}

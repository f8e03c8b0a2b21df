package listener

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshnode/health/internal/hostile"
	"github.com/meshnode/health/internal/probetest"
)

// readAnswer reads one answer from c and returns it whole, its body by
// its Content-Length: what a client gets before the close.
func readAnswer(t *testing.T, c net.Conn) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var raw strings.Builder
	resp, err := http.ReadResponse(bufio.NewReader(io.TeeReader(c, &raw)), nil)
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	return raw.String()
}

// closedAfter reads c to its close and returns how long that took from
// since: the close must be a FIN, not a reset, after nothing but what
// wantMore allows.
func closedAfter(t *testing.T, c net.Conn, since time.Time, within time.Duration) time.Duration {
	t.Helper()
	_ = c.SetReadDeadline(since.Add(within))
	rest, err := io.ReadAll(c)
	took := time.Since(since)
	require.NoError(t, err, "a FIN within %v", within)
	assert.Empty(t, string(rest), "nothing after the answer")
	return took
}

// TestProbeAnsweredAndClosed: a probe is answered, counted, and closed
// with a FIN at once, nothing held.
func TestProbeAnsweredAndClosed(t *testing.T) {
	s := serveTest(t, 0)
	c := dialSending(t, s.addr, probe)
	got := readAnswer(t, c)
	assert.True(t, strings.HasPrefix(got, "HTTP/1.1 200 OK\r\n"), got)
	assert.Less(t, closedAfter(t, c, time.Now(), time.Second), holdTimeout/2, "closed at once, not held")
	assert.Equal(t, int64(1), s.answered.Load())
	assert.Equal(t, uint64(1), s.counters.Accepted.Load())
	probetest.Eventually(t, func() bool { return s.counters.Held.Load() == 0 }, "nothing held")
}

// TestPipelinedNeedsNoHold: a request read whole with another behind it is
// answered once and closed at once with a FIN: what was read needs no hold.
func TestPipelinedNeedsNoHold(t *testing.T) {
	s := serveTest(t, 0)
	c := dialSending(t, s.addr, probe+probe)
	readAnswer(t, c)
	assert.Less(t, closedAfter(t, c, time.Now(), time.Second), holdTimeout/2)
	assert.Equal(t, int64(1), s.answered.Load())
}

// TestHeaderDeadline: a header not whole 2 s after accept is closed
// unanswered: not before, and within a second after.
func TestHeaderDeadline(t *testing.T) {
	s := serveTest(t, 0)
	c := dialSending(t, s.addr, "GET /healthz HTTP/1.1\r\nHost: x\r\n")
	start := time.Now() // before the accept, which these bytes bring
	took := closedAfter(t, c, start, holdTimeout+time.Second)
	assert.GreaterOrEqual(t, took, holdTimeout)
	assert.Zero(t, s.answered.Load())
}

// TestHeldClose: after an answer to a client that may still be sending
// (a body declared, an Expect, a malformed or oversized header), the
// connection is held without a FIN until 2 s after the answer, then closed
// with one: not before, and within a second after.
func TestHeldClose(t *testing.T) {
	s := serveTest(t, 0)
	cases := map[string]struct{ raw, status string }{
		"a body declared":     {"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 1099511627776\r\n\r\n", "200"},
		"Expect":              {"GET /x HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n\r\n", "200"},
		"chunked, HTTP/1.0":   {"GET /x HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", "200"},
		"malformed":           {"GET /x HTTP/1.1\r\nHost: x\r\nX\r\n\r\n", "400"},
		"oversized":           {"GET /x HTTP/1.1\r\nHost: x\r\nX: " + strings.Repeat("a", maxHeader) + "\r\n\r\n", "431"},
		"oversized, in parts": {"GET /x HTTP/1.1\r\nHost: x\r\nX: " + strings.Repeat("a", maxHeader-40), "431"},
	}
	var wg sync.WaitGroup
	for name, tc := range cases {
		wg.Go(func() {
			c := dialSending(t, s.addr, tc.raw)
			if name == "oversized, in parts" {
				probetest.Eventually(t, func() bool { return s.counters.Accepted.Load() > 0 }, "the first part taken")
				_, _ = c.Write([]byte(strings.Repeat("b", 100)))
			}
			got := readAnswer(t, c)
			answered := time.Now()
			assert.True(t, strings.HasPrefix(got, "HTTP/1.") && strings.Contains(got, " "+tc.status+" "), "%s: %q", name, got)
			assert.Contains(t, got, "\r\nConnection: close\r\n", name)
			took := closedAfter(t, c, answered, holdTimeout+time.Second)
			// The client reads the answer a little after it was written.
			assert.GreaterOrEqual(t, took, holdTimeout-100*time.Millisecond, name)
		})
	}
	wg.Wait()
}

// TestHoldEndsAtTheClientsClose: a client held after its answer that shuts
// its sending side is closed at once, with a FIN.
func TestHoldEndsAtTheClientsClose(t *testing.T) {
	s := serveTest(t, 0)
	c := dialSending(t, s.addr, "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
	readAnswer(t, c)
	require.NoError(t, c.(*net.TCPConn).CloseWrite())
	assert.Less(t, closedAfter(t, c, time.Now(), time.Second), holdTimeout/2)
}

// TestHoldDiscardsWhatArrives: what a held client sends is read and
// discarded, never parsed: a request sent then is not answered, and a
// body up to maxDiscard is held to the end of the hold; past it, the
// connection is let go at once.
func TestHoldDiscardsWhatArrives(t *testing.T) {
	s := serveTest(t, 0)
	for _, tc := range []struct {
		body  int
		until time.Duration
	}{{maxDiscard - len(probe), holdTimeout}, {4 * maxDiscard, 0}} {
		c := dialSending(t, s.addr, "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n")
		readAnswer(t, c)
		answered := time.Now()
		_, err := c.Write([]byte(probe + strings.Repeat("x", tc.body)))
		if tc.until == 0 { // let go mid-stream: a reset is fine
			assert.True(t, probetest.ClosedWithin(c, holdTimeout/2), "let go past maxDiscard")
			continue
		}
		require.NoError(t, err)
		took := closedAfter(t, c, answered, holdTimeout+time.Second)
		assert.GreaterOrEqual(t, took, holdTimeout-100*time.Millisecond)
	}
	assert.Equal(t, int64(2), s.answered.Load(), "one answer each")
}

// TestEvictsTheOldestWhenFull: at the bound, a newcomer closes the
// connection held longest, counted and logged once, and a probe is
// answered all the same.
func TestEvictsTheOldestWhenFull(t *testing.T) {
	s := serveTest(t, 3)
	var waiting []net.Conn
	for i := range 4 {
		waiting = append(waiting, dialSending(t, s.addr, "GET /x HTTP/1.1\r\n"))
		probetest.Eventually(t, func() bool { return s.counters.Accepted.Load() == uint64(i+1) }, "accepted in order")
	}
	assert.True(t, probetest.ClosedWithin(waiting[0], time.Second), "the oldest closed")
	assert.Equal(t, uint64(1), s.counters.Evicted.Load())
	assert.Equal(t, int64(3), s.counters.Held.Load())
	assert.NotZero(t, s.counters.LastEviction.Load())
	assert.Contains(t, probetest.Exchange(t, s.addr, probe, time.Second), "\r\n\r\nok\n")
	assert.Equal(t, uint64(2), s.counters.Evicted.Load())
	for _, c := range waiting {
		_ = c.Close() // a client's close lets its connection go at once
	}
	require.NoError(t, s.stop())
	assert.Equal(t, 1, probetest.Count(s.logs.String(), `level=WARN msg="health: the probe listener is full; closing the connections held longest to make room" limit=3`), s.logs.String())
}

// TestResetsLetGo: a client that resets its connection mid-header, or
// mid-hold, is let go at once.
func TestResetsLetGo(t *testing.T) {
	s := serveTest(t, 0)
	for _, raw := range []string{"GET /x HTTP/1.1\r\n", "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n"} {
		c := dialSending(t, s.addr, raw)
		probetest.Eventually(t, func() bool { return s.counters.Held.Load() == 1 }, "held")
		require.NoError(t, c.(*net.TCPConn).SetLinger(0))
		require.NoError(t, c.Close())
		probetest.Eventually(t, func() bool { return s.counters.Held.Load() == 0 }, "let go at the reset: "+raw)
	}
}

// TestNoGoroutinePerConnection: a crowd of clients waiting for their
// headers costs Serve no goroutine.
func TestNoGoroutinePerConnection(t *testing.T) {
	s := serveTest(t, 0)
	assert.Contains(t, probetest.Exchange(t, s.addr, probe, time.Second), "ok\n") // serving
	before := runtime.NumGoroutine()
	for range 200 {
		dialSending(t, s.addr, "GET /x HTTP/1.1\r\n")
	}
	probetest.Eventually(t, func() bool { return s.counters.Held.Load() == 200 }, "all held")
	assert.Equal(t, before, runtime.NumGoroutine())
}

// TestUrgentByteReadPast: a read steps over a TCP urgent byte, so a header
// with one is answered like any other.
func TestUrgentByteReadPast(t *testing.T) {
	s := serveTest(t, 0)
	c := dialSending(t, s.addr, "GET /x HTTP/1.1\r\nHost: x\r\n")
	require.NoError(t, hostile.SendUrgent(c))
	_, err := c.Write([]byte("\r\n"))
	require.NoError(t, err)
	assert.Contains(t, readAnswer(t, c), "\r\n\r\nok\n")
}

// TestSilentClientWaitsInTheKernel: a client that sends nothing is not
// accepted (deferred accept) past the header deadline, and once it writes
// it is answered.
func TestSilentClientWaitsInTheKernel(t *testing.T) {
	if testing.Short() {
		t.Skip("waits past the 2 s header deadline")
	}
	s := serveTest(t, 0)
	c := dialSending(t, s.addr, "")
	time.Sleep(holdTimeout + 500*time.Millisecond) // what is tested is that nothing happens
	assert.Zero(t, s.counters.Accepted.Load())
	_, err := c.Write([]byte(probe))
	require.NoError(t, err)
	assert.Contains(t, readAnswer(t, c), "ok\n")
}

// TestShutdown: once ctx is done Serve refuses new connections at once,
// still answers a header that completes within its deadline, holds what
// it holds to its end, and returns then, with everything closed.
func TestShutdown(t *testing.T) {
	s := serveTest(t, 0)
	partial := dialSending(t, s.addr, "GET /x HTTP/1.1\r\n")
	held := dialSending(t, s.addr, "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n")
	readAnswer(t, held)
	heldSince := time.Now()
	probetest.Eventually(t, func() bool { return s.counters.Held.Load() == 2 }, "both held")

	stopped := make(chan error, 1)
	go func() { stopped <- s.stop() }()
	probetest.Eventually(t, func() bool {
		c, err := net.Dial("tcp", s.addr)
		if err == nil {
			_ = c.Close()
		}
		return errors.Is(err, syscall.ECONNREFUSED)
	}, "new connections refused")
	_, err := partial.Write([]byte("Host: x\r\n\r\n"))
	require.NoError(t, err)
	assert.Contains(t, readAnswer(t, partial), "ok\n", "answered after ctx is done")
	select {
	case <-stopped:
		t.Fatal("Serve returned while a connection was held")
	case <-time.After(time.Until(heldSince.Add(holdTimeout - 200*time.Millisecond))):
	}
	select {
	case err := <-stopped:
		require.NoError(t, err)
	case <-time.After(holdTimeout):
		t.Fatal("Serve did not return once the last hold ended")
	}
	assert.Zero(t, s.counters.Held.Load())
	closedAfter(t, held, time.Now(), time.Second) // already closed
}

// TestHostileFlood: clients of every hostile kind at once, each
// reconnecting as soon as it is done, against a bound they overrun: every
// probe is answered within a second, Serve starts no goroutine for them,
// and once ctx is done it returns within the bound of two holds.
func TestHostileFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("floods for 3 s")
	}
	s := serveTest(t, 64)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var clients sync.WaitGroup
	for _, cl := range hostile.Clients() {
		for range 10 {
			clients.Go(func() {
				for ctx.Err() == nil {
					c, err := net.DialTimeout("tcp", s.addr, time.Second)
					if err != nil {
						continue
					}
					cl.Run(ctx, c)
					_ = c.Close()
				}
			})
		}
	}
	probes := 0
	for ctx.Err() == nil {
		sent := time.Now()
		status, _, err := probetest.KubeletProbe(s.addr, "/healthz")
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, status)
		require.Less(t, time.Since(sent), time.Second, "the kubelet's timeout")
		probes++
		time.Sleep(50 * time.Millisecond)
	}
	assert.Greater(t, probes, 10)
	assert.Positive(t, s.counters.Evicted.Load(), "the bound overrun")
	start := time.Now()
	require.NoError(t, s.stop())
	assert.Less(t, time.Since(start), 2*holdTimeout+time.Second)
	clients.Wait()
}

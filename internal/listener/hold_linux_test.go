package listener

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshnode/health/internal/probetest"
)

// holdMargin bounds how late past its time a hold may end: far above the
// room's scheduling delay, even under -race on a loaded machine, and far
// below the times it bounds.
const holdMargin = time.Second

// TestRoomHoldsWhatNetHTTPHolds sends each request that net/http holds
// after its answer, alone and sending nothing more: the answer comes at
// once, without net/http, and the connection is held in the room, not a
// slot, for as long as net/http would hold it, tested on both sides:
// until the read deadline, headerTimeout from accept, for a body that
// never comes; for a declared body past maxDrain, or a header refused
// with 431, its FIN at once and its close rstAvoidanceDelay later.
func TestRoomHoldsWhatNetHTTPHolds(t *testing.T) {
	for _, tc := range []struct {
		name, request, status string
		lingers               bool // FIN at once, then the close
	}{
		{"OPTIONS * with a declared body never sent", "OPTIONS * HTTP/1.1\r\nHost: x\r\nContent-Length: 4096\r\n\r\n", "404", false},
		{"a declared body, in part", "POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nabc", "200", false},
		{"Expect: 100-continue, body never sent", "GET /healthz HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 10\r\n\r\n", "200", false},
		{"a chunked body that never ends", "GET /readyz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", "503", false},
		{"a declared body past maxDrain", "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 262145\r\n\r\n", "200", true},
		{"a header over the cap", "GET /healthz HTTP/1.1\r\nHost: x\r\nX: " + strings.Repeat("a", maxRequestBytes) + "\r\n\r\n", "431", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRoomRig(t, nil, 16)
			start := time.Now() // before the accept, so before the deadline's start
			c := r.dial(tc.request)
			require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
			got, err := io.ReadAll(c)
			eof := time.Since(start)
			require.NoError(t, err, "a FIN after the answer, not a reset")
			assert.True(t, strings.HasPrefix(string(got), "HTTP/1.1 "+tc.status+" "), "%.60q", got)
			ended := headerTimeout // where net/http's read of the body ends
			if tc.lingers {
				ended = 0
			}
			assert.GreaterOrEqual(t, eof, ended, "closed before net/http would")
			assert.Less(t, eof, ended+holdMargin, "held long after net/http would close")

			closes := ended // where the server lets go of the connection
			// Go 1.26's net/http never lingers with an Expect (hold.go).
			if tc.lingers || failedDrain == holdLinger && (expectLingers || !strings.Contains(tc.request, "Expect")) {
				closes += rstAvoidanceDelay
				// Added to the room after its FIN: the client may see
				// the FIN first.
				probetest.Eventually(t, func() bool { return r.waiting() == 1 }, "the linger held")
			}
			probetest.Eventually(t, func() bool { return r.waiting() == 0 }, "the room letting go")
			assert.GreaterOrEqual(t, time.Since(start), closes)
			assert.Less(t, time.Since(start), closes+holdMargin)
			assert.Zero(t, len(r.handed), "never handed to net/http")
			assert.Zero(t, r.counters.Evicted.Load(), "no eviction")
		})
	}
}

// TestRoomLetsGoOnceTheBodyEnds: a held connection is let go as soon as
// what net/http waits for comes: the rest of its body (declared or
// chunked), its client's FIN, or a reset.
func TestRoomLetsGoOnceTheBodyEnds(t *testing.T) {
	shut := func(c net.Conn) { require.NoError(t, c.(*net.TCPConn).CloseWrite()) }
	reset := func(c net.Conn) {
		require.NoError(t, c.(*net.TCPConn).SetLinger(0))
		require.NoError(t, c.Close())
	}
	send := func(s string) func(net.Conn) {
		return func(c net.Conn) {
			_, err := io.WriteString(c, s)
			require.NoError(t, err)
		}
	}
	declared := "POST /readyz HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nhello"
	chunked := "POST /readyz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab"
	for _, tc := range []struct {
		name, request string
		then          func(net.Conn)
		failed        bool // net/http's drain fails, and ends as failedDrain
	}{
		{"the rest of a declared body", declared, send("world"), false},
		{"more than the rest of a declared body", declared, send("world and more"), false},
		{"a declared body under maxDrain, at once", "PUT /x HTTP/1.1\r\nHost: x\r\nContent-Length: 262143\r\n\r\n", send(strings.Repeat("a", 256<<10-1)), false},
		{"the rest of a chunked body", chunked, send("cde\r\n0\r\n\r\n"), false},
		{"a chunked body, then its trailer", chunked, send("cde\r\n0\r\nX-T: 1\r\n\r\n"), false},
		{"the client's FIN", declared, shut, true},
		{"a malformed chunk", chunked, send("cdefg\r\n"), true},
		{"a reset", declared, reset, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRoomRig(t, nil, 16)
			start := time.Now()
			c := r.dial(tc.request)
			br := bufio.NewReader(c)
			require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
			resp, err := http.ReadResponse(br, nil)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			// Added to the room after its answer: the client may see that first.
			probetest.Eventually(t, func() bool { return r.waiting() == 1 }, "held after the answer")
			tc.then(c)
			sent := time.Now()
			probetest.Eventually(t, func() bool { return r.waiting() == 0 }, "the room letting go")
			lets := time.Since(sent)
			if tc.failed && failedDrain == holdLinger {
				assert.GreaterOrEqual(t, lets, rstAvoidanceDelay, "as Go 1.27's net/http, a linger")
				lets -= rstAvoidanceDelay
			}
			assert.Less(t, lets, holdMargin, "let go at once")
			assert.Less(t, time.Since(start), headerTimeout, "before the read deadline")
			assert.Zero(t, r.counters.Evicted.Load(), "no eviction")
		})
	}
}

// TestRoomBoundsAStreamedBody: a client that streams a body's framing as
// fast as it can (a trailer that never ends) is let go at net/http's cap
// on it, well before the read deadline, rather than read for as long as it
// sends: the room's goroutine, which reads it, has every other connection
// to serve.
func TestRoomBoundsAStreamedBody(t *testing.T) {
	r := newRoomRig(t, nil, 16)
	r.probes.ready.Store(true)
	start := time.Now()
	c := r.dial("POST /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n")
	refused := make(chan time.Duration, 1)
	go func() {
		junk := []byte(strings.Repeat("a", 1<<20))
		for range 64 { // at most 64 MiB, a few seconds at most on loopback
			if _, err := c.Write(junk); err != nil {
				refused <- time.Since(start) // the server closed
				return
			}
		}
		refused <- time.Hour
	}()
	select {
	case after := <-refused:
		assert.Less(t, after, headerTimeout, "let go at the trailer's cap, not at the read deadline")
	case <-time.After(10 * time.Second):
		t.Fatal("still reading after 10 s")
	}
	probetest.Eventually(t, func() bool { return r.waiting() == 0 }, "the room letting go")
	assertProbesAnswered(t, r.addr, 2)
}

// TestNetHTTPAnswersAreHeldToo: a request with a body that request.go
// does not parse is net/http's to answer, with its own bytes, and then,
// its slot freed, held in the room as net/http would hold it: until the
// read deadline for a body not yet whole, a linger for one past maxDrain,
// no time for one whole; always ending in a FIN, never a reset.
func TestNetHTTPAnswersAreHeldToo(t *testing.T) {
	s := serveTest(t, nil, Options{})
	reference := new(fakeProbes)
	reference.ready.Store(true)
	refAddr := serveReference(t, reference, nil)
	for _, tc := range []struct {
		name, request string
		closes        time.Duration // after the dial, at the earliest
	}{
		{"an escaped path, part of its body", "POST /%68ealthz HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + strings.Repeat("a", 50), headerTimeout},
		{"bare LF line ends, a body never sent", "POST /healthz HTTP/1.1\nHost: x\nContent-Length: 100\n\n", headerTimeout},
		{"an 8-bit header value, a chunked body in part", "POST /healthz HTTP/1.1\r\nHost: x\r\nX: caf\xc3\xa9\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", headerTimeout},
		{"an escaped path, its whole body", "POST /%68ealthz HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc", 0},
		{"an escaped path, a body past maxDrain", "POST /%68ealthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1099511627776\r\n\r\n", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := probetest.MaskDate(t, probetest.ExchangeShut(t, refAddr, tc.request, time.Second))
			got := probetest.MaskDate(t, probetest.ExchangeShut(t, s.addr, tc.request, time.Second))
			require.Equal(t, want, got)

			start := time.Now()
			c, err := net.Dial("tcp", s.addr)
			require.NoError(t, err)
			defer c.Close()
			_, err = io.WriteString(c, tc.request)
			require.NoError(t, err)
			require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			require.NoError(t, err)
			probetest.Eventually(t, func() bool { return s.counters.Held.Load() == 0 }, "the slot freed")
			_, err = io.Copy(io.Discard, br)
			require.NoError(t, err, "a FIN, not a reset")
			require.NoError(t, resp.Body.Close())
			assert.GreaterOrEqual(t, time.Since(start), tc.closes, "closed before net/http would")
			assert.Less(t, time.Since(start), tc.closes+holdMargin, "held long after net/http would close")
		})
	}
}

package health

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/health/internal/hostile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

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

// TestNothingLingers floods a bound of a single connection, which is never
// evicted while it is the newest, with requests that net/http would hold
// after reading them, reading or waiting for a body, or sleeping 500 ms
// before it closes. Each held slot would queue the probe behind every
// client, 16 deep; answered and closed at once, none does.
func TestNothingLingers(t *testing.T) {
	floodTest(t)
	for _, hc := range hostile.Clients() {
		if hc.Lingers {
			t.Run(hc.Name, func(t *testing.T) { floodAndProbe(t, hc, 1, 16, 4) })
		}
	}
}

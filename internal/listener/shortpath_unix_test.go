//go:build unix

package listener

import (
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

// TestShortPathTakesOnlyPlainProbes drives the limiter without net/http,
// so that whatever answers a client here is the short path: every plain
// probe is answered and closed inside Accept, which goes on to the next
// connection, and every other request's connection is returned by Accept,
// untouched, for net/http.
func TestShortPathTakesOnlyPlainProbes(t *testing.T) {
	probes, counters := new(fakeProbes), new(Counters)
	probes.ready.Store(true)
	ln, err := Listen("127.0.0.1:0")
	require.NoError(t, err)
	l := newConnLimiter(ln, maxConns, Options{Answer: probes.answer, Counters: counters, Log: discardLog})
	accepted := make(chan net.Conn)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- nc
		}
	}()
	defer func() {
		_ = l.Close()
		<-done
	}()

	send := func(raw string) net.Conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		_, err = io.WriteString(c, raw)
		require.NoError(t, err)
		return c
	}
	plain := probetest.PlainProbes()
	for _, raw := range plain {
		c := send(raw)
		answered := make(chan string, 1)
		go func() {
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			b, _ := io.ReadAll(c)
			answered <- string(b)
		}()
		select {
		case answer := <-answered:
			assert.Regexp(t, `^HTTP/1\.[01] 200 OK\r\n`, answer, "%q", raw)
		case nc := <-accepted:
			t.Errorf("%q reached net/http", raw)
			_ = nc.Close()
			<-answered
		}
		_ = c.Close()
	}
	for _, tc := range probetest.NotPlainProbes {
		c := send(tc.Raw)
		select {
		case nc := <-accepted:
			assert.Equal(t, c.LocalAddr().String(), nc.RemoteAddr().String(), "%s: %q", tc.Name, tc.Raw)
			l.trackState(nc, http.StateClosed) // as net/http's goroutine would
			_ = nc.Close()
		case <-time.After(10 * time.Second):
			t.Errorf("%s: %q never reached net/http", tc.Name, tc.Raw)
		}
		_ = c.Close()
	}

	assert.Equal(t, uint64(len(plain)+len(probetest.NotPlainProbes)), counters.Accepted.Load())
	var healthz int
	for _, raw := range plain {
		if strings.Contains(raw, " /healthz") {
			healthz++
		}
	}
	assert.Equal(t, uint64(healthz), probes.liveness.Load())
	assert.Equal(t, uint64(len(plain)-healthz), probes.readiness.Load())
	assert.Zero(t, probes.other.Load())
}

// TestShortPathCountsOnlyWhatItRead hands the short path a connection
// whose peeked bytes are not in its receive queue (the client wrote
// nothing): the read that should consume them fails, and the connection
// is closed unanswered and uncounted, as net/http counts an answer only
// once it has read the request.
func TestShortPathCountsOnlyWhatItRead(t *testing.T) {
	probes := new(fakeProbes)
	sc, client := probetest.TCPPair(t)
	calls := newConnCalls()
	buf := make([]byte, maxRequestBytes)
	p, _ := calls.peek(sc, buf)
	require.Equal(t, peekedEmpty, p)
	n := copy(buf, probeRequest) // as if peeked

	assert.True(t, newShortPath(probes.answer).answer(calls, sc, buf, n), "taken, and closed")
	assert.Zero(t, probes.answered())
	_ = client.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(client)
	assert.NoError(t, err, "closed, not left open")
	assert.Empty(t, got, "unanswered")
}

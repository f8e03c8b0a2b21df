package listener

import (
	"bufio"
	"context"
	"errors"
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

// TestShutdownUnderFlood: Serve, its room full of clients that keep
// coming, returns at once when its ctx ends, well within its bound.
func TestShutdownUnderFlood(t *testing.T) {
	floodTest(t)
	s := serveTest(t, nil, Options{Limit: 8, room: 64})
	stop := flood(t, s.addr, 256, stalled)
	probetest.Eventually(t, func() bool { return s.counters.Evicted.Load() > 0 }, "the room full")
	start := time.Now()
	require.NoError(t, s.stop())
	assert.Less(t, time.Since(start), time.Second, "Serve's shutdown")
	stop()
}

// TestHandedOnAtShutdown: a connection handed on for net/http that its
// Accept never took (Serve stopping) is closed by wait, not leaked.
func TestHandedOnAtShutdown(t *testing.T) {
	ln, err := Listen("127.0.0.1:0")
	require.NoError(t, err)
	l := newConnLimiter(ln, maxLimit, Options{Counters: new(Counters), Log: discardLog})
	require.NotNil(t, l.room)
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	_, err = io.WriteString(c, "POST /readyz HTTP/1.1\r\nHost: x\r\n\r\n") // whole, and for net/http
	require.NoError(t, err)
	probetest.Eventually(t, func() bool { return len(l.handoff) == 1 }, "the connection handed on")
	require.NoError(t, l.Close())
	l.wait()
	assert.True(t, probetest.ClosedByServer(c), "closed at shutdown")
}

// TestShutdownWaitsOutHolds: a connection held after its answer when ctx
// ends is held to its time still, as a plain server's Shutdown waits for
// it, and only then closed, with a FIN; Serve returns once it is. Tested
// on both sides: not before the hold's end, and within holdMargin of it.
func TestShutdownWaitsOutHolds(t *testing.T) {
	for _, tc := range []struct {
		name, request string
		ends          time.Duration // after the dial, at the earliest
	}{
		{"a declared body never sent", "POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n", headerTimeout},
		{"a header over the cap, lingered on", "GET /healthz HTTP/1.1\r\nHost: x\r\nX: " + strings.Repeat("a", maxRequestBytes) + "\r\n\r\n", rstAvoidanceDelay},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := serveTest(t, nil, Options{})
			start := time.Now()
			c, err := net.Dial("tcp", s.addr)
			require.NoError(t, err)
			defer c.Close()
			_, err = io.WriteString(c, tc.request)
			require.NoError(t, err)
			require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			answered := time.Now()

			returned := make(chan error, 1)
			go func() { returned <- s.stop() }()
			select {
			case err := <-returned:
				assert.NoError(t, err)
			case <-time.After(10 * time.Second):
				t.Fatal("Serve did not return")
			}
			assert.GreaterOrEqual(t, time.Since(start), tc.ends, "let go before the hold's end")
			assert.Less(t, time.Since(answered), tc.ends+holdMargin, "held long past its end")
			_, err = io.Copy(io.Discard, c)
			assert.NoError(t, err, "a FIN, not a reset")
		})
	}
}

// TestListenerFailureHoldsToo: when the listener fails on its own, Serve
// ends as a shutdown does: a connection answered and lingering is held to
// its time, with a FIN, not closed at once over unread bytes, which would
// reset its answer (see rstAvoidanceDelay).
func TestListenerFailureHoldsToo(t *testing.T) {
	inner, err := Listen("127.0.0.1:0")
	require.NoError(t, err)
	ln := probetest.NewListener(inner, probetest.Faults{FailAfter: 1, Err: errors.New("the listener broke")})
	c, err := net.Dial("tcp", inner.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	_, err = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\nX: "+strings.Repeat("a", 3*maxRequestBytes)+"\r\n\r\n")
	require.NoError(t, err)
	probes := new(fakeProbes)
	returned := make(chan error, 1)
	start := time.Now()
	go func() {
		returned <- Serve(context.Background(), ln, Options{Handler: probes, Answer: probes.answer, Counters: new(Counters), Log: discardLog, Limit: maxLimit})
	}()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	got, err := io.ReadAll(c)
	require.NoError(t, err, "a FIN, not a reset")
	assert.True(t, strings.HasPrefix(string(got), "HTTP/1.1 431 "), "%.40q", got)
	select {
	case err := <-returned:
		assert.ErrorContains(t, err, "the listener broke")
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
	assert.GreaterOrEqual(t, time.Since(start), rstAvoidanceDelay, "the linger cut short")
	assert.Less(t, time.Since(start), rstAvoidanceDelay+holdMargin)
}

// TestShutdownReadsWhatSlotsWereSent: a slot without a request whose
// net/http goroutine has not read its partial header yet (a ReadGate holds
// it) is closed with a FIN when Serve stops, whether its ctx ended or its
// listener failed: the close alone, over the unread header, is a reset on
// Linux. The listener defers accept, so the header is queued once the
// connection is accepted.
func TestShutdownReadsWhatSlotsWereSent(t *testing.T) {
	for _, tc := range []struct {
		name      string
		failAfter int // the listener fails after this many accepts; 0: ctx ends
	}{
		{"ctx ended", 0},
		{"the listener failed", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inner, err := Listen("127.0.0.1:0")
			require.NoError(t, err)
			gate := make(chan struct{})
			ln := probetest.NewListener(inner, probetest.Faults{FailAfter: tc.failAfter, Err: errors.New("the listener broke"), ReadGate: gate})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			returned := make(chan error, 1)
			go func() {
				returned <- Serve(ctx, ln, Options{Handler: new(fakeProbes), Counters: new(Counters), Log: discardLog, Limit: 8, room: -1})
			}()
			c, err := net.Dial("tcp", inner.Addr().String())
			require.NoError(t, err)
			defer c.Close()
			_, err = io.WriteString(c, "GET /readyz HTTP/1.1\r\nHo")
			require.NoError(t, err)
			probetest.Eventually(t, func() bool { return ln.Counts().Accepted == 1 }, "the slot accepted")
			if tc.failAfter == 0 {
				cancel() // else the listener's failure alone must stop Serve
			}
			require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
			_, err = io.ReadAll(c)
			assert.NoError(t, err, "a FIN, not a reset")
			close(gate) // net/http's goroutine may end now, and Serve return
			select {
			case err := <-returned:
				if tc.failAfter > 0 {
					assert.ErrorContains(t, err, "the listener broke")
				} else {
					assert.NoError(t, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Serve did not return")
			}
		})
	}
}

// TestAdmittedAtShutdownReadFirst: a connection admitted once Serve is
// stopping is closed at once, with a FIN: what it sent is read first.
func TestAdmittedAtShutdownReadFirst(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := newConnLimiter(ln, 8, Options{Counters: new(Counters), Log: discardLog, room: -1})
	defer l.Close()
	l.shutdown()
	server, client := pairWithUnread(t, "GET /readyz HTTP/1.1\r\nHo")
	l.admit(server, peekedIncomplete)
	require.NoError(t, client.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err = io.ReadAll(client)
	assert.NoError(t, err, "a FIN, not a reset")
}

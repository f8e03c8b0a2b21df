//go:build unix

package listener

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshnode/health/internal/hostile"
	"github.com/meshnode/health/internal/probetest"
)

// TestAcceptCallsAllocate pins the allocations of ours for a probe
// answered at accept: the peek allocates only the connection's RawConn,
// which the read and the write reuse, and the answer, its read, write and
// close allocate nothing. It logs what net's own TCPListener.Accept
// allocates besides, which is not ours to pin (6 on Go 1.26 and 1.27: the
// socket, the connection and their addresses).
func TestAcceptCallsAllocate(t *testing.T) {
	const runs = 50
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	// AllocsPerRun calls its function runs+1 times, each on a fresh
	// connection whose client has written its request.
	dial := func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		_, err = io.WriteString(c, probeRequest)
		require.NoError(t, err)
	}
	for range runs + 1 {
		dial()
	}
	acceptAllocs := testing.AllocsPerRun(runs, func() {
		nc, err := ln.Accept()
		require.NoError(t, err)
		_ = nc.Close()
	})
	t.Logf("net's TCPListener.Accept and Close: %v allocations", acceptAllocs)
	conns := make([]net.Conn, runs+1)
	for i := range conns {
		dial()
		conns[i], err = ln.Accept()
		require.NoError(t, err)
		t.Cleanup(func() { _ = conns[i].Close() })
	}
	probes := new(fakeProbes)
	r := newReader(probes.answer)
	calls, buf := r.calls, r.buf

	next := 0
	peekAllocs := testing.AllocsPerRun(runs, func() {
		p, n := calls.peek(conns[next], buf, true, false)
		require.Equal(t, peekedComplete, p)
		require.Equal(t, len(probeRequest), n)
		next++
	})
	assert.Equal(t, 1.0, peekAllocs, "the peek: the RawConn only")

	next = 0 // the same connections: the peek consumed nothing
	answerAllocs := testing.AllocsPerRun(runs, func() {
		_, n := calls.peek(conns[next], buf, true, false)
		settled, _, _ := r.answer(conns[next], n)
		require.True(t, settled)
		next++
	})
	assert.Equal(t, 1.0, answerAllocs, "the peek, the answer and the close: the RawConn only")
	assert.Equal(t, uint64(runs+1), probes.readiness.Load(), "every probe answered")
}

// TestUrgentByteAsNetHTTP: a request with an urgent (MSG_OOB) byte in it,
// which a peek does not see past by itself, is answered at once, by the
// room, as net/http answers it, which reads past the byte: not left to
// time out at 2 s. On a kernel whose peek cannot get past the byte, one
// in the header leaves it waiting, to be closed at its deadline with a
// FIN (see peeked.awaited); the rest are answered as before.
func TestUrgentByteAsNetHTTP(t *testing.T) {
	for _, kernel := range []struct {
		name       string
		peekOffset func(*testing.T) bool // makes the kernel so, and reports whether it could
		waits      string                // the request that waits for its deadline
	}{
		{"this kernel", peekOffsetWorks, ""},
		{"a kernel without SO_PEEK_OFF for TCP", withoutPeekOffset, "in the header"},
	} {
		t.Run(kernel.name, func(t *testing.T) {
			// Before Serve starts: its goroutines read what this sets.
			if hasRoom() && !kernel.peekOffset(t) {
				t.Skip("this kernel cannot be made so")
			}
			var viaNetHTTP atomic.Int32
			backing := new(fakeProbes)
			backing.ready.Store(true)
			s := serveTest(t, nil, Options{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				viaNetHTTP.Add(1)
				backing.ServeHTTP(w, r)
			})})
			refAddr := serveReference(t, s.probes, nil)
			for _, tc := range []struct{ name, before, after string }{
				{"in the header", "GET /readyz HTTP/1.1\r\nHo", "st: x\r\n\r\n"},
				{"before the request", "", "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n"},
				{"in the body", "POST /readyz HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nab", "cd"},
			} {
				for _, addr := range []string{refAddr, s.addr} {
					start := time.Now()
					c, err := net.Dial("tcp", addr)
					require.NoError(t, err)
					defer c.Close()
					_, err = io.WriteString(c, tc.before)
					require.NoError(t, err)
					require.NoError(t, hostile.SendUrgent(c))
					_, err = io.WriteString(c, tc.after)
					require.NoError(t, err)
					require.NoError(t, c.SetReadDeadline(time.Now().Add(2*headerTimeout)))
					got, err := io.ReadAll(c)
					require.NoError(t, err, "%s: closed with a FIN", tc.name)
					if addr == s.addr && hasRoom() && tc.name == kernel.waits {
						assert.Empty(t, got, tc.name)
						assert.GreaterOrEqual(t, time.Since(start), headerTimeout, "%s: closed before its deadline", tc.name)
						continue
					}
					assert.Less(t, time.Since(start), headerTimeout/2, "%s: answered late", tc.name)
					assert.Regexp(t, `^HTTP/1\.1 200 OK\r\n(.*\r\n)*\r\nok\n$`, string(got), tc.name)
				}
			}
			if hasRoom() {
				assert.Zero(t, viaNetHTTP.Load(), "answered by the room, or by none")
			}
		})
	}
}

// TestDiscardUnreadEndsInAFIN: a slot closed by the shutdown with a
// partial header unread ends in a FIN once discardUnread has read it; the
// close alone sends a reset on Linux, the row that shows the test can fail.
func TestDiscardUnreadEndsInAFIN(t *testing.T) {
	const partial = "GET /readyz HTTP/1.1\r\nHo"
	for _, tc := range []struct {
		name      string
		discard   bool
		wantReset bool
	}{
		{"discarded, then closed", true, false},
		{"closed alone", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.wantReset && runtime.GOOS != "linux" {
				t.Skip("Linux resets a close over unread bytes (RFC 2525, 2.17); other systems need not")
			}
			server, client := pairWithUnread(t, partial)
			if tc.discard {
				discardUnread(server)
			}
			require.NoError(t, server.Close())
			require.NoError(t, client.SetReadDeadline(time.Now().Add(10*time.Second)))
			_, err := io.ReadAll(client)
			assert.Equal(t, tc.wantReset, errors.Is(err, syscall.ECONNRESET), "reset: %v", err)
			if !tc.wantReset {
				assert.NoError(t, err, "a FIN")
			}
		})
	}
}

// TestDiscardUnreadTakesNoReadLock: discardUnread returns at once while
// net/http's goroutine is parked in Read on the connection, which holds
// the connection's read lock until its header timeout; a shutdown that
// waited for it would wait that long.
func TestDiscardUnreadTakesNoReadLock(t *testing.T) {
	server, _ := probetest.TCPPair(t)
	readEnded := make(chan struct{})
	go func() {
		defer close(readEnded)
		_, _ = server.Read(make([]byte, 1)) // parks until the close below
	}()
	probetest.Eventually(t, func() bool { return parkedInRead("TestDiscardUnreadTakesNoReadLock") }, "the Read parked")
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		discardUnread(server)
	}()
	select {
	case <-returned:
	case <-time.After(5 * time.Second):
		t.Error("discardUnread waited for the parked Read")
	}
	require.NoError(t, server.Close())
	<-readEnded
	<-returned
}

// parkedInRead reports whether a goroutine started by test waits in the
// network poller.
func parkedInRead(test string) bool {
	buf := make([]byte, 1<<20)
	for _, g := range bytes.Split(buf[:runtime.Stack(buf, true)], []byte("\n\n")) {
		if bytes.Contains(g, []byte("[IO wait")) && bytes.Contains(g, []byte(test+".func")) {
			return true
		}
	}
	return false
}

// pairWithUnread returns a loopback TCP connection's two ends once what
// the client end sent, sent, waits unread at the server end.
func pairWithUnread(t *testing.T, sent string) (server, client net.Conn) {
	t.Helper()
	server, client = probetest.TCPPair(t)
	_, err := io.WriteString(client, sent)
	require.NoError(t, err)
	buf := make([]byte, maxRequestBytes)
	probetest.Eventually(t, func() bool {
		_, n := newConnCalls().peek(server, buf, false, false)
		return n == len(sent)
	}, "what the client sent, queued")
	return server, client
}

//go:build unix

package listener

import (
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
		p, n := calls.peek(conns[next], buf)
		require.Equal(t, peekedComplete, p)
		require.Equal(t, len(probeRequest), n)
		next++
	})
	assert.Equal(t, 1.0, peekAllocs, "the peek: the RawConn only")

	next = 0 // the same connections: the peek consumed nothing
	answerAllocs := testing.AllocsPerRun(runs, func() {
		_, n := calls.peek(conns[next], buf)
		settled, _, _ := r.answer(conns[next], n)
		require.True(t, settled)
		next++
	})
	assert.Equal(t, 1.0, answerAllocs, "the peek, the answer and the close: the RawConn only")
	assert.Equal(t, uint64(runs+1), probes.readiness.Load(), "every probe answered")
}

// TestUrgentByteAsNetHTTP: a header with an urgent (MSG_OOB) byte in it,
// which a peek never sees past, is answered at once as net/http answers
// it, which reads past the byte: not left to time out at 2 s.
func TestUrgentByteAsNetHTTP(t *testing.T) {
	s := serveTest(t, nil, Options{})
	reference := new(fakeProbes)
	reference.ready.Store(true)
	refAddr := serveReference(t, reference, nil)
	for _, addr := range []string{refAddr, s.addr} {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer c.Close()
		_, err = io.WriteString(c, "GET /readyz HTTP/1.1\r\nHo")
		require.NoError(t, err)
		rc, err := c.(*net.TCPConn).SyscallConn()
		require.NoError(t, err)
		require.NoError(t, rc.Write(func(fd uintptr) bool {
			err = syscall.Sendto(int(fd), []byte("!"), syscall.MSG_OOB, nil)
			return true
		}))
		require.NoError(t, err)
		_, err = io.WriteString(c, "st: x\r\n\r\n")
		require.NoError(t, err)
		require.NoError(t, c.SetReadDeadline(time.Now().Add(time.Second)))
		got, err := io.ReadAll(c)
		require.NoError(t, err, "answered and closed within a second")
		assert.Regexp(t, `^HTTP/1\.1 200 OK\r\n(.*\r\n)*\r\nok\n$`, string(got))
	}
	assert.Equal(t, reference.readiness.Load(), s.probes.readiness.Load(), "counted alike")
}

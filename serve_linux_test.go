package health

import (
	"context"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestServeReturnsListenerFailure shuts the listening socket's reading
// side behind Serve's back, so that accept fails on its own, while a
// connection it accepted is held open: Serve returns the failure, naming
// the address, once that connection has run to its deadline and
// everything it started has ended.
func TestServeReturnsListenerFailure(t *testing.T) {
	s, logs := newTestServer(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	socket := dupSocket(t, ln)
	held, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer held.Close()
	_, err = io.WriteString(held, "GET /healthz HTTP/1.1\r\n") // stalled, held open
	require.NoError(t, err)

	served := make(chan error, 1)
	go func() { served <- s.Serve(context.Background(), ln) }()
	eventually(t, func() bool { return s.Status().Conns.Held == 1 }, "the stalled connection held")
	require.NoError(t, syscall.Shutdown(socket, syscall.SHUT_RD))
	err = <-served // that it returns on its own is the point
	require.ErrorIs(t, err, syscall.EINVAL)
	assert.Contains(t, err.Error(), ln.Addr().String())
	goleak.VerifyNone(t) // nothing left running
	assertClosedByServer(t, held, "the connection it had accepted")
	assert.Equal(t, 1, logs.count(`level=ERROR msg="health: stopped serving probes: the listener failed"`), logs.String())
}

// dupSocket returns a descriptor of ln's socket of the test's own, closed
// at the test's end, as Serve takes one (without File, which would make
// the socket blocking).
func dupSocket(t *testing.T, ln net.Listener) int {
	t.Helper()
	rc, err := ln.(syscall.Conn).SyscallConn()
	require.NoError(t, err)
	fd, dupErr := -1, error(nil)
	require.NoError(t, rc.Control(func(s uintptr) { fd, dupErr = syscall.Dup(int(s)) }))
	require.NoError(t, dupErr)
	t.Cleanup(func() { _ = syscall.Close(fd) })
	return fd
}

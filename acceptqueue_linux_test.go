package health

import (
	"context"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAcceptQueued: it says whether a connection waits to be accepted,
// and where it cannot tell, yes.
func TestAcceptQueued(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	assert.False(t, acceptQueued(ln, time.Millisecond), "nobody connecting")

	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	start := time.Now()
	assert.True(t, acceptQueued(ln, time.Minute), "a connection in the queue")
	assert.Less(t, time.Since(start), 10*time.Second, "without waiting out its wait")

	assert.True(t, acceptQueued(gatedListener{ln.(*net.TCPListener)}.withoutSyscallConn(), time.Minute), "not a socket it can poll")
}

// TestQueuedAfterPoll: ppoll's count is read only when it succeeded. On
// an error the count is -1 as a uintptr, and a signal's EINTR, frequent
// under the runtime's preemption, must not read as a connection waiting.
func TestQueuedAfterPoll(t *testing.T) {
	failed := ^uintptr(0)
	for _, tc := range []struct {
		n     uintptr
		errno syscall.Errno
		want  bool
	}{
		{0, 0, false},
		{1, 0, true},
		{failed, syscall.EINTR, false},
		{failed, syscall.EINVAL, true},
		{failed, syscall.ENOSYS, true},
	} {
		assert.Equal(t, tc.want, queuedAfterPoll(tc.n, tc.errno), "n=%#x errno=%v", tc.n, tc.errno)
	}
}

// withoutSyscallConn hides the listener's descriptor, as a wrapper that
// does not embed it does.
func (l gatedListener) withoutSyscallConn() net.Listener { return struct{ net.Listener }{l} }

// TestOutOfDescriptorsWithNobodyConnecting: the rest of the process holds
// every descriptor, so accept fails however empty its queue, and Accept
// comes round again and again. It says so once, and closes nothing until
// a connection arrives, then makes room for it: the connections waiting in
// slots might be probes about to speak.
func TestOutOfDescriptorsWithNobodyConnecting(t *testing.T) {
	s, logs, ln := listenReady(t)
	counting := &countingListener{Listener: ln, limit: 16, outOfFDsAt: 3}
	addr, _ := startServingOn(t, counting, func(ctx context.Context, ln net.Listener) error { return s.serve(ctx, ln, 16) })
	for range 3 {
		dialStalled(t, addr)
	}
	_, _, before := counting.counts()
	start := time.Now()
	eventually(t, func() bool {
		_, _, outOfFDs := counting.counts()
		return outOfFDs >= before+20 || s.conns.evicted.Load() > 0
	}, "Accept coming round with no descriptor left")
	assert.Zero(t, s.conns.evicted.Load(), "closed for nobody")
	assert.Equal(t, 1, logs.count("health: out of file descriptors"), "said once, though nothing was closed")
	// Each time round, Accept waits up to quarantineLook for a
	// connection (less when a signal ends the wait): it does not spin.
	assert.GreaterOrEqual(t, time.Since(start), 5*quarantineLook, "20 accepts at the limit")

	assertProbesAnswered(t, addr, 2)
	assert.Positive(t, s.conns.evicted.Load(), "room made for the probes")
}

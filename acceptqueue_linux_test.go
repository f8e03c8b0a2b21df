package health

import (
	"context"
	"net"
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

// withoutSyscallConn hides the listener's descriptor, as a wrapper that
// does not embed it does.
func (l gatedListener) withoutSyscallConn() net.Listener { return struct{ net.Listener }{l} }

// TestOutOfDescriptorsWithNobodyConnecting: the rest of the process holds
// every descriptor, so accept fails however empty its queue, and Accept
// comes round again and again. It closes nothing until a connection
// arrives, then makes room for it: the connections waiting in slots might
// be probes about to speak.
func TestOutOfDescriptorsWithNobodyConnecting(t *testing.T) {
	s, _, ln := listenReady(t)
	counting := &countingListener{Listener: ln, limit: 16, outOfFDsAt: 3}
	addr, _ := startServingOn(t, counting, func(ctx context.Context, ln net.Listener) error { return s.serve(ctx, ln, 16) })
	for range 3 {
		dialStalled(t, addr)
	}
	eventually(t, func() bool {
		_, _, outOfFDs := counting.counts()
		return outOfFDs >= 20 || s.conns.evicted.Load() > 0
	}, "Accept coming round with no descriptor left")
	assert.Zero(t, s.conns.evicted.Load(), "closed for nobody")

	assertProbesAnswered(t, addr, 2)
	assert.Positive(t, s.conns.evicted.Load(), "room made for the probes")
}

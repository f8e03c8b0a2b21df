package listener

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/meshnode/health/internal/probetest"
	"github.com/stretchr/testify/require"
)

// TestAcceptQueued: it says whether a connection waits to be accepted,
// and where it cannot tell, yes, with the poll's error if the poll
// failed.
func TestAcceptQueued(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	queued, err := acceptQueued(ln, time.Millisecond)
	assert.False(t, queued, "nobody connecting")
	assert.NoError(t, err)

	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	start := time.Now()
	queued, err = acceptQueued(ln, time.Minute)
	assert.True(t, queued, "a connection in the queue")
	assert.NoError(t, err)
	assert.Less(t, time.Since(start), 10*time.Second, "without waiting out its wait")

	queued, err = acceptQueued(probetest.HideDescriptor(ln), time.Minute)
	assert.True(t, queued, "not a socket it can poll")
	assert.NoError(t, err, "nothing failed")

	queued, err = acceptQueued(probetest.NewListener(ln, probetest.Faults{ControlErr: errCannotPoll}), time.Minute)
	assert.True(t, queued, "a socket it failed to poll")
	assert.ErrorIs(t, err, errCannotPoll)
}

// TestQueuedAfterPoll: ppoll's count is read only when it succeeded. On
// an error the count is -1 as a uintptr, and a signal's EINTR, frequent
// under the runtime's preemption, must not read as a connection waiting.
// Any other error cannot tell, and is returned.
func TestQueuedAfterPoll(t *testing.T) {
	failed := ^uintptr(0)
	for _, tc := range []struct {
		n       uintptr
		errno   syscall.Errno
		want    bool
		wantErr error
	}{
		{0, 0, false, nil},
		{1, 0, true, nil},
		{failed, syscall.EINTR, false, nil},
		{failed, syscall.EINVAL, true, syscall.EINVAL},
		{failed, syscall.ENOMEM, true, syscall.ENOMEM},
	} {
		got, err := queuedAfterPoll(tc.n, tc.errno)
		assert.Equal(t, tc.want, got, "n=%#x errno=%v", tc.n, tc.errno)
		if tc.wantErr == nil {
			assert.NoError(t, err, "errno=%v", tc.errno)
		} else {
			assert.ErrorIs(t, err, tc.wantErr)
		}
	}
}

// errCannotPoll is the failure of a socket whose descriptor cannot be
// reached, so that acceptQueued's poll fails, as it would on an error of
// ppoll's.
var errCannotPoll = errors.New("cannot poll")

// TestOutOfDescriptorsCannotTellIsLogged: when Accept cannot tell whether
// a connection waits, it makes room as if one did, which may close a
// connection for nobody, and says so, once a minute, with the error.
func TestOutOfDescriptorsCannotTellIsLogged(t *testing.T) {
	ln, err := Listen("127.0.0.1:0")
	require.NoError(t, err)
	counting := probetest.NewListener(ln, probetest.Faults{ControlErr: errCannotPoll, Limit: 16, OutOfDescriptorsAt: 1})
	s := serveTest(t, counting, Options{Limit: 16})
	addr, logs := s.addr, s.logs
	for range 3 {
		dialStalled(t, addr)
	}
	probetest.Eventually(t, func() bool { return s.counters.Evicted.Load() >= 2 }, "room made twice, as if someone waited")
	assert.Equal(t, 1, probetest.Count(logs.String(), "health: out of file descriptors, and cannot tell whether a connection waits"), "said once")
	// The error is on that line, and on Serve's warning that it cannot
	// defer accept either, which needs the same descriptor.
	assert.Equal(t, 1, probetest.Count(logs.String(), "cannot defer accept"))
	assert.Equal(t, 2, probetest.Count(logs.String(), errCannotPoll.Error()), "with the error")
}

// TestOutOfDescriptorsWithNobodyConnecting: the rest of the process holds
// every descriptor, so accept fails however empty its queue, and Accept
// comes round again and again. It says so once, and closes nothing until
// a connection arrives, then makes room for it: the connections waiting in
// slots might be probes about to speak.
func TestOutOfDescriptorsWithNobodyConnecting(t *testing.T) {
	ln, err := Listen("127.0.0.1:0")
	require.NoError(t, err)
	counting := probetest.NewListener(ln, probetest.Faults{Limit: 16, OutOfDescriptorsAt: 3})
	s := serveTest(t, counting, Options{Limit: 16})
	addr, logs := s.addr, s.logs
	for range 3 {
		dialStalled(t, addr)
	}
	before := counting.Counts().OutOfDescriptors
	start := time.Now()
	probetest.Eventually(t, func() bool {
		return counting.Counts().OutOfDescriptors >= before+20 || s.counters.Evicted.Load() > 0
	}, "Accept coming round with no descriptor left")
	assert.Zero(t, s.counters.Evicted.Load(), "closed for nobody")
	assert.Equal(t, 1, probetest.Count(logs.String(), "health: out of file descriptors"), "said once, though nothing was closed")
	// Each time round, Accept waits up to descriptorRetry for a
	// connection (less when a signal ends the wait): it does not spin.
	assert.GreaterOrEqual(t, time.Since(start), 5*descriptorRetry, "20 accepts at the limit")

	assertProbesAnswered(t, addr, 2)
	assert.Positive(t, s.counters.Evicted.Load(), "room made for the probes")
}

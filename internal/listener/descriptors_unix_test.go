//go:build unix

package listener

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshnode/health/internal/probetest"
)

// TestOutOfDescriptorsMakesRoom runs Serve on a listener whose accept fails
// for lack of descriptors once 3 connections are open, below the bound of
// 16, while stalled clients keep arriving. Serve must make room by closing
// the oldest of them, not back off as net/http does (5 ms doubling to 1 s,
// a log line each time), and say so once.
func TestOutOfDescriptorsMakesRoom(t *testing.T) {
	floodTest(t)
	ln, err := Listen("127.0.0.1:0")
	require.NoError(t, err)
	counting := probetest.NewListener(ln, probetest.Faults{Limit: 16, OutOfDescriptorsAt: 3})
	s := serveTest(t, counting, Options{Limit: 16})
	addr, logs := s.addr, s.logs

	stop := flood(t, addr, 32, stalled)
	probetest.Eventually(t, func() bool { return s.counters.Evicted.Load() > 0 }, "the flood evicting")
	assertProbesAnswered(t, addr, 10)
	stop()
	counts := counting.Counts()
	assert.Equal(t, 3, counts.MaxOpen)
	assert.Positive(t, counts.OutOfDescriptors, "accept ran out of descriptors")
	assert.Equal(t, 1, probetest.Count(logs.String(), `level=WARN msg="health: out of file descriptors; closing the oldest connections that have not sent a whole request"`), logs.String())
	assert.Zero(t, probetest.Count(logs.String(), "Accept error"), "net/http's retry line, once per retry")
	assert.Positive(t, s.counters.Evicted.Load())
}

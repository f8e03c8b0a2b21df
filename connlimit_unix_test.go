//go:build unix

package health

import (
	"context"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestOutOfDescriptorsMakesRoom runs Serve on a listener whose accept fails
// for lack of descriptors once 3 connections are open, below the bound of
// 16, while stalled clients keep arriving. Serve must make room by closing
// the oldest of them, not back off as net/http does (5 ms doubling to 1 s,
// a log line each time), and say so once.
func TestOutOfDescriptorsMakesRoom(t *testing.T) {
	floodTest(t)
	s, logs, ln := listenReady(t)
	counting := &countingListener{Listener: ln, limit: 16, outOfFDsAt: 3}
	addr, _ := startServingOn(t, counting, func(ctx context.Context, ln net.Listener) error { return s.serve(ctx, ln, 16) })

	stop := flood(t, addr, 32, stalled)
	eventually(t, func() bool { return s.conns.evicted.Load() > 0 }, "the flood evicting")
	assertProbesAnswered(t, addr, 10)
	stop()
	maxOpen, _, outOfFDs := counting.counts()
	assert.Equal(t, 3, maxOpen)
	assert.Positive(t, outOfFDs, "accept ran out of descriptors")
	assert.Equal(t, 1, logs.count(`level=WARN msg="health: out of file descriptors; closing the oldest connections that have not sent a request"`), logs.String())
	assert.Zero(t, logs.count("Accept error"), "net/http's retry line, once per retry")
	assert.Positive(t, s.conns.evicted.Load())
}

package listener

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshnode/health/internal/probetest"
)

// serveHTTPTest runs serveHTTP, Serve's form outside Linux, on ln, with a
// handler that answers ok, until stop or the test's end.
func serveHTTPTest(t *testing.T, ln net.Listener, limit int) *served {
	t.Helper()
	s := &served{counters: &Counters{}, logs: &probetest.LogBuffer{}}
	opts := Options{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			s.answered.Add(1)
			_, _ = w.Write(okResponse.Body)
		}),
		Counters: s.counters,
		Log:      logTo(s.logs),
	}
	s.addr = ln.Addr().String()
	s.stop = probetest.Start(t, func(ctx context.Context) error { return serveHTTP(ctx, ln, opts, limit) })
	return s
}

func TestServeHTTPAnswers(t *testing.T) {
	s := serveHTTPTest(t, probetest.Listen(t), 16)
	got := probetest.Exchange(t, s.addr, probe, 5*time.Second)
	assert.True(t, strings.HasPrefix(got, "HTTP/1.1 200 OK\r\n"), got)
	assert.Contains(t, got, "\r\nConnection: close\r\n")
	require.NoError(t, s.stop())
	assert.Equal(t, uint64(1), s.counters.Accepted.Load())
	assert.Zero(t, s.counters.Held.Load())
	assert.Equal(t, int64(1), s.answered.Load())
}

// TestServeHTTPEvictsTheOldest: at the bound, a newcomer closes the
// connection accepted first, counted and logged once.
func TestServeHTTPEvictsTheOldest(t *testing.T) {
	s := serveHTTPTest(t, probetest.Listen(t), 2)
	var waiting []net.Conn
	for i := range 3 {
		waiting = append(waiting, dialSending(t, s.addr, "GET /x HTTP/1.1\r\n"))
		probetest.Eventually(t, func() bool { return s.counters.Accepted.Load() == uint64(i+1) }, "accepted in order")
	}
	assert.True(t, probetest.ClosedWithin(waiting[0], time.Second), "the oldest closed")
	assert.Equal(t, uint64(1), s.counters.Evicted.Load())
	assert.Equal(t, int64(2), s.counters.Held.Load())
	for _, c := range waiting {
		_ = c.Close()
	}
	require.NoError(t, s.stop())
	assert.Equal(t, 1, probetest.Count(s.logs.String(), `msg="health: the probe listener is full; closing the connections held longest to make room" limit=2`), s.logs.String())
}

// TestServeHTTPOutOfDescriptors: an accept that fails for lack of
// descriptors closes the oldest connection and accepts again, where
// net/http would back off while the kubelet's connection waits.
func TestServeHTTPOutOfDescriptors(t *testing.T) {
	if !isOutOfDescriptors(syscall.EMFILE) {
		t.Skip("no EMFILE here")
	}
	ln := &failingListener{Listener: probetest.Listen(t), err: syscall.EMFILE}
	s := serveHTTPTest(t, ln, 16)
	first := dialSending(t, s.addr, "GET /x HTTP/1.1\r\n")
	probetest.Eventually(t, func() bool { return s.counters.Accepted.Load() == 1 }, "accepted")
	ln.failures.Store(1)
	assert.Contains(t, probetest.Exchange(t, s.addr, probe, 5*time.Second), "ok\n")
	assert.True(t, probetest.ClosedWithin(first, time.Second), "the oldest closed to make room")
	assert.Equal(t, uint64(1), s.counters.Evicted.Load())
	require.NoError(t, s.stop())
	assert.Equal(t, 1, probetest.Count(s.logs.String(), `msg="health: out of file descriptors; closing the connections held longest to make room"`))
}

// TestServeHTTPListenerFailure: a listener that fails on its own ends
// serveHTTP with its error, once the connections it holds are closed.
func TestServeHTTPListenerFailure(t *testing.T) {
	broken := errors.New("listener broke")
	ln := &failingListener{Listener: probetest.Listen(t), err: broken}
	s := serveHTTPTest(t, ln, 16)
	held := dialSending(t, s.addr, "GET /x HTTP/1.1\r\n")
	probetest.Eventually(t, func() bool { return s.counters.Held.Load() == 1 }, "held")
	ln.failures.Store(1 << 30)
	dialSending(t, s.addr, "") // wakes Accept
	// Closed long before its header's deadline: serveHTTP has ended on
	// the failure, not on a stop.
	assert.True(t, probetest.ClosedWithin(held, time.Second))
	require.ErrorIs(t, s.stop(), broken)
}

// failingListener fails the next failures calls of Accept with err. The
// connection such a call would have taken waits for the next call, as an
// accept that fails leaves it queued in the kernel.
type failingListener struct {
	net.Listener
	err      error
	failures atomic.Int64
	queued   net.Conn // Accept's alone
}

func (l *failingListener) Accept() (net.Conn, error) {
	if nc := l.queued; nc != nil {
		l.queued = nil
		return nc, nil
	}
	nc, err := l.Listener.Accept()
	if err == nil && l.failures.Add(-1) >= 0 {
		l.queued = nc
		return nil, l.err
	}
	return nc, err
}

func (l *failingListener) Close() error {
	if l.queued != nil {
		_ = l.queued.Close()
	}
	return l.Listener.Close()
}

package listener

import (
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshnode/health/internal/probetest"
)

// TestShutdownClosesWhatWaits: connections without a whole request have
// nothing to answer, so Serve's shutdown closes them at once, in the
// waiting room or in slots, rather than wait out their header timeout, and
// with a FIN, having read what they sent.
func TestShutdownClosesWhatWaits(t *testing.T) {
	for _, room := range []struct {
		name string
		size int
	}{{"room", 0}, {"no room", -1}} {
		t.Run(room.name, func(t *testing.T) {
			s := serveTest(t, nil, Options{Limit: 8, room: room.size})
			var conns []net.Conn
			for range 4 {
				conns = append(conns, dialStalled(t, s.addr))
			}
			probetest.Eventually(t, func() bool { return s.counters.Accepted.Load() == 4 }, "the stalled clients accepted")
			start := time.Now()
			require.NoError(t, s.stop())
			assert.Less(t, time.Since(start), headerTimeout/2, "Serve's shutdown, with only stalled clients")
			for i, c := range conns {
				require.NoError(t, c.SetReadDeadline(time.Now().Add(atOnce)))
				_, err := io.ReadAll(c)
				assert.NoError(t, err, "client %d closed by the shutdown, with a FIN: its partial header read first", i)
			}
			assert.Zero(t, s.counters.Evicted.Load(), "a shutdown is no eviction")
		})
	}
}

// TestShutdownBound: a request still being answered when ctx ends is given
// shutdownBound, not less, and the contract's 5 s at most (a second's
// margin); then its connection is closed, not abandoned, the bound is
// logged once, and Serve returns as soon as the handler does.
func TestShutdownBound(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the shutdown bound, 5 s")
	}
	const contractBound = 5 * time.Second
	require.LessOrEqual(t, shutdownBound, contractBound)
	entered, release := make(chan struct{}), make(chan struct{})
	s := serveTest(t, nil, Options{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		close(entered)
		<-release
	})})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the server's cleanup: Serve can then return
	c, err := net.Dial("tcp", s.addr)
	require.NoError(t, err)
	defer c.Close()
	_, err = io.WriteString(c, slotProbe) // net/http's, so the handler's
	require.NoError(t, err)
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the request never reached the handler")
	}

	start := time.Now()
	returned := make(chan error, 1)
	go func() { returned <- s.stop() }()
	require.True(t, probetest.ClosedWithin(c, contractBound+time.Second), "not closed within a second of the contract's bound")
	assert.GreaterOrEqual(t, time.Since(start), shutdownBound, "closed before the bound")
	select {
	case err := <-returned:
		t.Fatalf("Serve returned (%v) while its handler still runs", err)
	default:
	}
	unblock()
	select {
	case err := <-returned:
		assert.NoError(t, err)
	case <-time.After(time.Second):
		t.Fatal("Serve did not return within a second of its handler")
	}
	assert.Equal(t, 1, probetest.Count(s.logs.String(), `level=WARN msg="health: shutdown bound reached; closing the connections still open" bound=5s`), s.logs.String())
}

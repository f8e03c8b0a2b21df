//go:build unix

package listener

import (
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshnode/health/internal/probetest"
)

// TestShortPathTakesWhatItAnswers drives the limiter without net/http, so
// that whatever answers a client here is the short path: every plain probe
// and every other request it parses is answered, and every other request's
// connection is returned by Accept, untouched, for net/http.
func TestShortPathTakesWhatItAnswers(t *testing.T) {
	r := newRoomRig(t, nil, 0) // the room where there is one
	probes, counters := r.probes, r.counters
	probes.ready.Store(true)
	answered := probetest.PlainProbes()
	for _, tc := range probetest.OtherRequests {
		answered = append(answered, tc.Raw)
	}
	for _, raw := range answered {
		c := r.dial(raw)
		_ = c.(*net.TCPConn).CloseWrite() // all it sends: a held body ends
		got := make(chan string, 1)
		go func() {
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			b, _ := io.ReadAll(c)
			got <- string(b)
		}()
		select {
		case answer := <-got:
			assert.Regexp(t, `^HTTP/1\.[01] (200 OK|404 Not Found|417 Expectation Failed)\r\n`, answer, "%q", raw)
		case nc := <-r.handed:
			t.Errorf("%q reached net/http", raw)
			r.release(nc)
			<-got
		}
		_ = c.Close()
	}
	for _, tc := range probetest.NetHTTPRequests {
		c := r.dial(tc.Raw)
		select {
		case nc := <-r.handed:
			assert.Equal(t, c.LocalAddr().String(), nc.RemoteAddr().String(), "%s: %q", tc.Name, tc.Raw)
			r.release(nc)
		case <-time.After(10 * time.Second):
			t.Errorf("%s: %q never reached net/http", tc.Name, tc.Raw)
		}
		_ = c.Close()
	}

	assert.Equal(t, uint64(len(answered)+len(probetest.NetHTTPRequests)), counters.Accepted.Load())
	uncountedHere := 0 // net/http's 417s, which no handler counts
	for _, tc := range probetest.OtherRequests {
		if strings.Contains(tc.Name, "(417)") {
			uncountedHere++
		}
	}
	assert.Equal(t, uint64(len(answered)-uncountedHere), probes.answered(), "each counted once")
}

// TestShortPathCountsOnlyWhatItRead hands the short path a connection
// whose peeked bytes are not in its receive queue (the client wrote
// nothing): the read that should consume them fails, and the connection
// is closed unanswered and uncounted, as net/http counts an answer only
// once it has read the request.
func TestShortPathCountsOnlyWhatItRead(t *testing.T) {
	probes := new(fakeProbes)
	sc, client := probetest.TCPPair(t)
	r := newReader(probes.answer)
	p, _ := r.peek(sc)
	require.Equal(t, peekedEmpty, p)
	n := copy(r.buf, probeRequest) // as if peeked

	settled, _, _ := r.answer(sc, n)
	assert.True(t, settled, "taken, and closed")
	assert.Zero(t, probes.answered())
	_ = client.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(client)
	assert.NoError(t, err, "closed, not left open")
	assert.Empty(t, got, "unanswered")
}

// TestRefuseNeverWaits refuses a connection whose client keeps its
// receive window shut, its send buffer already full: Accept calls refuse,
// so it must return at once, dropping the 431, rather than wait for the
// client to read. A write through net's netpoller would wait for as long as
// the client does; the bound here only has to be longer than the
// scheduling noise of a loaded machine.
func TestRefuseNeverWaits(t *testing.T) {
	sc, client := probetest.TCPPair(t)
	require.NoError(t, client.(*net.TCPConn).SetReadBuffer(4096))
	require.NoError(t, sc.(*net.TCPConn).SetWriteBuffer(4096))
	r := newReader(nil)
	p, _ := r.peek(sc)
	require.Equal(t, peekedEmpty, p)
	// Fill the send buffer and the client's receive buffer.
	require.NoError(t, sc.SetWriteDeadline(time.Now().Add(200*time.Millisecond)))
	_, err := sc.Write(make([]byte, 4<<20))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "the buffers hold less than 4 MiB")
	require.NoError(t, sc.SetWriteDeadline(time.Time{}))

	returned := make(chan struct{})
	go func() {
		defer close(returned)
		r.refuse(sc, 0)
	}()
	select {
	case <-returned:
	case <-time.After(time.Second):
		_ = sc.Close() // ends the write
		<-returned
		t.Fatal("refuse waited for the client")
	}
}

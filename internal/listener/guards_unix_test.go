//go:build unix

package listener

import (
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/meshnode/health/internal/probetest"
)

// TestRefuseNeverWaits refuses a connection whose client keeps its
// receive window shut, its send buffer already full: Accept calls refuse,
// so it must return at once, dropping the 431, rather than wait for the
// client to read. A write through net's poller would wait for as long as
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
		r.refuse(sc, 0, false)
	}()
	select {
	case <-returned:
	case <-time.After(time.Second):
		_ = sc.Close() // ends the write
		<-returned
		t.Fatal("refuse waited for the client")
	}
}

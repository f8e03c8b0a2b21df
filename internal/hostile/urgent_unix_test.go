//go:build unix

package hostile

import (
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/meshnode/health/internal/probetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An Urgent client sends its request, then one urgent byte, which the
// server reads out of band, and awaits the close.
func TestRunUrgent(t *testing.T) {
	srv, done := play(t, Client{Request: "req", Then: Urgent})
	got := make([]byte, 3)
	_, err := io.ReadFull(srv, got)
	require.NoError(t, err)
	assert.Equal(t, "req", string(got))
	rc, err := srv.(*net.TCPConn).SyscallConn()
	require.NoError(t, err)
	// Polled: waiting for readability after a try that found no urgent
	// byte sometimes never woke (2 runs in 30 timed out).
	oob := make([]byte, 1)
	var n int
	probetest.Eventually(t, func() bool {
		require.NoError(t, rc.Control(func(fd uintptr) {
			n, _, err = syscall.Recvfrom(int(fd), oob, syscall.MSG_OOB|syscall.MSG_DONTWAIT)
		}))
		return err == nil
	}, "the urgent byte arriving")
	assert.Equal(t, "!", string(oob[:n]), "the urgent byte")
	_ = srv.Close()
	<-done
}

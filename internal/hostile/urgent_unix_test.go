//go:build unix

package hostile

import (
	"io"
	"net"
	"syscall"
	"testing"

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
	oob := make([]byte, 1)
	var n int
	require.NoError(t, rc.Read(func(fd uintptr) bool {
		n, _, err = syscall.Recvfrom(int(fd), oob, syscall.MSG_OOB)
		return err != syscall.EAGAIN && err != syscall.EINVAL
	}))
	require.NoError(t, err)
	assert.Equal(t, "!", string(oob[:n]), "the urgent byte")
	_ = srv.Close()
	<-done
}

//go:build !unix

package health

import "net"

// answerAndClose closes nc: outside Unix the peek never sees a complete
// request, so no probe is answered at accept.
func answerAndClose(nc net.Conn, _, _ []byte) { _ = nc.Close() }

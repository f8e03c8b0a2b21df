//go:build !unix

package listener

import "net"

// Outside Unix the peek never sees a request, so nothing is answered or
// refused at accept, and read and write are never called.

func (*connCalls) read([]byte) bool { return false }
func (*connCalls) write([]byte)     {}

func (*connCalls) readFrom(net.Conn, []byte) (int, bool) { return 0, false }

//go:build !linux

package health

import (
	"net"
	"syscall"
)

// setDeferAccept does nothing outside Linux, which alone has
// TCP_DEFER_ACCEPT: there a silent client takes a connection slot until it
// is evicted.
func setDeferAccept(syscall.RawConn) error { return nil }

// peekRequest cannot look outside Linux: a connection counts as answering
// once net/http has read its request.
func peekRequest(net.Conn, []byte) peeked { return peekedIncomplete }

//go:build !unix

package health

import "net"

// connCalls does nothing outside Unix, whose sockets API alone lets it
// read without consuming: a connection counts as answering once net/http
// has read its request.
type connCalls struct{}

func newConnCalls() *connCalls { return new(connCalls) }

// peek does not look: see connCalls.
func (*connCalls) peek(net.Conn, []byte) (peeked, int) { return peekedIncomplete, 0 }

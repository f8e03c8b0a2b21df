//go:build !unix

package health

import "net"

// peekRequest does not look outside Unix, whose sockets API alone lets it
// read without consuming: a connection counts as answering once net/http
// has read its request.
func peekRequest(net.Conn, []byte) (peeked, int) { return peekedIncomplete, 0 }

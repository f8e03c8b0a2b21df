//go:build !unix

package listener

import "net"

// connCalls does nothing outside Unix, whose sockets API alone lets it
// read without consuming: there net/http reads every connection, which
// counts as answering once net/http has read its request.
type connCalls struct {
	fd      int32 // always -1: there is no waiting room outside Linux
	rewound bool  // always false, as fd
}

func newConnCalls() *connCalls { return &connCalls{fd: -1} }

func descriptorOf(net.Conn) int32 { return -1 }

// peek does not look: see connCalls.
func (*connCalls) peek(net.Conn, []byte, bool, bool) (peeked, int) { return peekedIncomplete, 0 }

func (*connCalls) read([]byte) bool { return false }
func (*connCalls) write([]byte)     {}

func (*connCalls) readFrom(net.Conn, []byte) (int, bool) { return 0, false }
func (*connCalls) peekMore(net.Conn, []byte) (int, bool) { return 0, false }

// discardUnread does nothing outside Unix: a close there may reset a
// connection closed with bytes unread.
func discardUnread(net.Conn) {}

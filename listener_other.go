//go:build !linux

package health

import "net"

// setDeferAccept does nothing outside Linux, which alone has
// TCP_DEFER_ACCEPT: there a silent client takes a connection slot until it
// is evicted.
func setDeferAccept(net.Listener, bool) error { return nil }

// requestComplete reports false outside Linux: the limiter learns that a
// request is whole from the connection's own reads instead.
func requestComplete(net.Conn, []byte) bool { return false }

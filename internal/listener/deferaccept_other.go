//go:build !linux

package listener

import "syscall"

// setDeferAccept does nothing outside Linux, which alone has
// TCP_DEFER_ACCEPT: there a silent client takes a connection slot until it
// is evicted.
func setDeferAccept(syscall.RawConn) error { return nil }

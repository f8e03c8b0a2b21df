//go:build unix && !linux

package listener

import "errors"

// pastUrgentFD fails outside Linux, where no room waits on a peek: a
// header with an urgent byte is net/http's to read.
func (c *connCalls) pastUrgentFD(uintptr) bool {
	c.err = errors.ErrUnsupported
	return true
}

//go:build unix && !linux

package listener

import "errors"

// setPeekOffset fails outside Linux, where no room peeks again.
var setPeekOffset = func(uintptr, int) error { return errors.ErrUnsupported }

// pastUrgentFD fails outside Linux, where no room waits on a peek: a
// header with an urgent byte is net/http's to read.
func (c *connCalls) pastUrgentFD(uintptr) bool {
	c.err = errors.ErrUnsupported
	return true
}

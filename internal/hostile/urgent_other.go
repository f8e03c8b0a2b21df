//go:build !unix

package hostile

import (
	"errors"
	"net"
)

// SendUrgent cannot send urgent data outside Unix: the Urgent client
// there sends its request alone.
func SendUrgent(net.Conn) error { return errors.ErrUnsupported }

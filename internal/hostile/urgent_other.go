//go:build !unix

package hostile

import (
	"errors"
	"net"
)

// sendUrgent cannot send urgent data outside Unix: the Urgent client
// there sends its request alone.
func sendUrgent(net.Conn) error { return errors.ErrUnsupported }

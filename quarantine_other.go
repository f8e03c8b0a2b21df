//go:build !linux

package health

import (
	"errors"
	"net"
)

// readinessPoller exists on Linux only. Elsewhere there is no
// TCP_DEFER_ACCEPT either, so every silent client arrives empty, and
// holding them all apart would change more than the one case the
// quarantine is for: empty connections are admitted as any other.
type readinessPoller struct{}

func newReadinessPoller() (*readinessPoller, error) { return nil, errors.ErrUnsupported }

func (*readinessPoller) watch(int32, uint64) error { return errors.ErrUnsupported }
func (*readinessPoller) poll() ([]uint64, error)   { return nil, errors.ErrUnsupported }
func (*readinessPoller) close() error              { return nil }

// spoke is never asked: nothing is held.
func spoke(net.Conn) bool { return true }

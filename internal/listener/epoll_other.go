//go:build !linux

package listener

import "errors"

// poller exists on Linux alone, whose epoll can wait for many sockets
// edge-triggered beside the runtime's own: elsewhere there is no waiting
// room, and the slots hold what waits (see newRoom).
type poller struct{}

type readyEvent struct {
	id             uint64
	hangup, failed bool
}

func newPoller() (*poller, error)           { return nil, errors.ErrUnsupported }
func (*poller) watch(int32, uint64) error   { return errors.ErrUnsupported }
func (*poller) unwatch(int32)               {}
func (*poller) wait() ([]readyEvent, error) { return nil, errors.ErrUnsupported }
func (*poller) setDeadline(int64)           {}
func (*poller) close() error                { return nil }

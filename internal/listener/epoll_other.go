//go:build !linux

package listener

import "errors"

// epollSet exists on Linux alone: elsewhere there is no waiting room, and
// the slots hold what waits.
type epollSet struct{}

func newEpollSet() (*epollSet, error)         { return nil, errors.ErrUnsupported }
func (*epollSet) watch(int32, uint64) error   { return errors.ErrUnsupported }
func (*epollSet) unwatch(int32)               {}
func (*epollSet) wait() ([]readyEvent, error) { return nil, errors.ErrUnsupported }
func (*epollSet) setDeadline(int64)           {}
func (*epollSet) close() error                { return nil }

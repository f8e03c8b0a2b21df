//go:build unix

package listener

import (
	"errors"
	"syscall"
)

// softDescriptorLimit is RLIMIT_NOFILE's soft limit, or 0 if it cannot be
// read.
func softDescriptorLimit() uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || int64(lim.Cur) <= 0 {
		return 0 // unreadable, or unlimited (RLIM_INFINITY)
	}
	return uint64(lim.Cur)
}

// isOutOfDescriptors reports whether accept failed for lack of file
// descriptors, the process's or the system's, or of socket memory.
func isOutOfDescriptors(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}

// IsAddressInUse reports whether a bind failed because the port is taken.
func IsAddressInUse(err error) bool { return errors.Is(err, syscall.EADDRINUSE) }

package listener

import (
	"errors"
	"syscall"
)

// Winsock's own error numbers: Go's syscall.EADDRINUSE and EMFILE on
// Windows are values it invents, which Winsock never returns.
const (
	wsaEADDRINUSE = syscall.Errno(10048)
	wsaEMFILE     = syscall.Errno(10024) // no socket handle left
	wsaENOBUFS    = syscall.Errno(10055) // no buffer space for another socket
)

// softDescriptorLimit is 0, unknown: Windows has no RLIMIT_NOFILE.
func softDescriptorLimit() uint64 { return 0 }

// IsAddressInUse reports whether a bind failed because the port is taken.
func IsAddressInUse(err error) bool { return errors.Is(err, wsaEADDRINUSE) }

// isOutOfDescriptors reports whether accept failed for lack of sockets,
// which net/http would take for fatal.
func isOutOfDescriptors(err error) bool {
	return errors.Is(err, wsaEMFILE) || errors.Is(err, wsaENOBUFS)
}

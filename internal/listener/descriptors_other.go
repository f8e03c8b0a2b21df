//go:build !unix && !windows

package listener

// Without RLIMIT_NOFILE or Unix's or Windows's error numbers, a bind
// error is reported as it comes, and accept errors go to net/http.
func softDescriptorLimit() uint64   { return 0 }
func IsAddressInUse(error) bool     { return false }
func isOutOfDescriptors(error) bool { return false }

//go:build !unix && !windows

package listener

// softDescriptorLimit and the error tests know nothing here, without
// RLIMIT_NOFILE or Unix's or Windows's error numbers: a bind error is
// reported as it comes, and accept errors go to net/http, which retries.
func softDescriptorLimit() uint64   { return 0 }
func isAddressInUse(error) bool     { return false }
func isOutOfDescriptors(error) bool { return false }

//go:build !unix && !windows

package listener

// softDescriptorLimit is 0, unknown, where there is no RLIMIT_NOFILE: the
// bound is then maxLimit.
func softDescriptorLimit() uint64 { return 0 }

// isAddressInUse reports false: without Unix's or Windows's error numbers
// the bind error is reported as it comes.
func isAddressInUse(error) bool { return false }

// isOutOfDescriptors reports false where there is no RLIMIT_NOFILE to run
// out of: accept errors go to net/http, which retries them.
func isOutOfDescriptors(error) bool { return false }

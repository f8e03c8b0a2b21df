//go:build !unix

package health

// softDescriptorLimit is 0, unknown, where there is no RLIMIT_NOFILE: the
// bound is then maxConns.
func softDescriptorLimit() uint64 { return 0 }

// isOutOfDescriptors reports false where there is no RLIMIT_NOFILE to run
// out of: accept errors go to net/http, which retries them.
func isOutOfDescriptors(error) bool { return false }

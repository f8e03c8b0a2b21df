package main

import (
	"fmt"
	"syscall"
)

// setNofile sets RLIMIT_NOFILE, soft and hard, to n, so that a load can run
// the server under the descriptor limit a node agent may be given.
func setNofile(n uint64) error {
	lim := syscall.Rlimit{Cur: n, Max: n}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("setrlimit nofile %d: %w", n, err)
	}
	return nil
}

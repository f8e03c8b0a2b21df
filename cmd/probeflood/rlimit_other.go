//go:build !linux

package main

import "fmt"

// setNofile exists outside Linux only so that the command compiles on every
// OS (main refuses to run there). A limit asked for is an error rather than
// silently ignored: a load run without it would measure something else.
func setNofile(n uint64) error {
	return fmt.Errorf("setting the file-descriptor limit (-nofile %d) is implemented on Linux only", n)
}

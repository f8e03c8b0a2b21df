//go:build !linux

package main

import (
	"fmt"
	"runtime"
)

// newCPUCgroup exists outside Linux only so that the command compiles on
// every OS (main refuses to run there): a CFS quota is a Linux cgroup's.
func newCPUCgroup(cores float64) (*cpuCgroup, error) {
	return nil, fmt.Errorf("a CPU limit (%v cores) is a Linux cgroup's CFS quota; this is %s", cores, runtime.GOOS)
}

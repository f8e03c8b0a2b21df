package main

import (
	"fmt"
	"os"
)

// newCPUCgroup makes a cgroup for the server child with a quota of cores,
// in whichever cgroup hierarchy with the cpu controller the machine
// mounts, named after this process so that two runs do not meet.
func newCPUCgroup(cores float64) (*cpuCgroup, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	mounts, err := parseMountinfo(f)
	if err != nil {
		return nil, err
	}
	return makeCPUCgroup(mounts, fmt.Sprintf("probeflood-%d", os.Getpid()), cores, realCgroupFS)
}

// realCgroupFS is the kernel's cgroup file system.
var realCgroupFS = cgroupFS{
	mkdir: func(dir string) error { return os.Mkdir(dir, 0o755) },
	rmdir: os.Remove,
}

package main

import (
	"fmt"
	"syscall"
	"time"
)

// sampleCPU reads the process's own rusage (RUSAGE_SELF): user plus
// system time, every thread included.
func sampleCPU() (cpuSample, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return cpuSample{}, fmt.Errorf("getrusage: %w", err)
	}
	return cpuSample{wall: time.Now(), cpu: time.Duration(ru.Utime.Nano() + ru.Stime.Nano())}, nil
}

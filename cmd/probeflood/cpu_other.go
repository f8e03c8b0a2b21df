//go:build !linux

package main

import "errors"

// sampleCPU exists outside Linux only so that the command compiles on every
// OS (main refuses to run there).
func sampleCPU() (cpuSample, error) {
	return cpuSample{}, errors.New("reading the server's CPU time is implemented on Linux only")
}

package main

import (
	"fmt"
	"time"
)

// cpuSample is the process's CPU time (user and system, from its own
// rusage) at a moment of wall time.
type cpuSample struct {
	wall time.Time
	cpu  time.Duration
}

// coresBusy is the CPU the process used between two samples, in cores: 1
// is one core busy the whole time. It is negative when either sample is
// missing or they are out of order.
func coresBusy(start, end cpuSample) float64 {
	if start.wall.IsZero() || end.wall.IsZero() || !end.wall.After(start.wall) {
		return -1
	}
	return float64(end.cpu-start.cpu) / float64(end.wall.Sub(start.wall))
}

// formatCores prints coresBusy's figure as the table does.
func formatCores(c float64) string {
	if c < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", c)
}

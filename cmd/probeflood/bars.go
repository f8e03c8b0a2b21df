package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The bounds health's row of every load is held to, whatever the load:
// the contract bounds the server's memory by the cap on connections held,
// serves every connection from one loop rather than a goroutine each,
// logs a flood at most once a minute, and has Serve return within 5 s of
// its cancel, whatever clients still hold.
const (
	maxLiveHeapKiB = 16 << 10
	// maxGoroutines counts the server child's every goroutine, its own
	// two (the one reading the parent's marks, and the sampler)
	// included: Serve may then run on its own goroutine and one more,
	// whatever the load, where a goroutine a connection would be
	// thousands.
	maxGoroutines = 4
	// maxLogLines counts WARN and above over the server child's whole
	// run, every second of which is under the load.
	maxLogLines = 10
	maxShutdown = 5 * time.Second
)

// serverBoundsText states the bounds, for the tables' titles and -loads.
var serverBoundsText = fmt.Sprintf("peak live heap ≤ %d MiB, peak goroutines ≤ %d, ≤ %d log lines (WARN and above), Serve returned ≤ %.0f s after cancel",
	maxLiveHeapKiB>>10, maxGoroutines, maxLogLines, maxShutdown.Seconds())

// probePaths are the endpoints every probe round asks, in the tables'
// order.
var probePaths = [2]string{"/healthz", "/readyz"}

// verdict is which bars a row was held to and which of them it missed.
type verdict struct {
	checked []string // each bar held to, as the bar cell names it
	missed  []string // each bar missed, with the figure that missed it
}

func (v verdict) passed() bool { return len(v.missed) == 0 }

// cell is the row's bar cell: the bars held to, and pass, or FAIL and
// what missed.
func (v verdict) cell() string {
	if len(v.checked) == 0 {
		return "report only"
	}
	bars := strings.Join(v.checked, ", ")
	if v.passed() {
		return bars + ": pass"
	}
	return bars + ": FAIL: " + strings.Join(v.missed, "; ")
}

// probeVerdict holds the probes' share of correct answers on each
// endpoint (shares, in probePaths' order) to bar; a bar of 0 holds them
// to nothing.
func probeVerdict(bar float64, shares [2]float64) verdict {
	var v verdict
	if bar <= 0 {
		return v
	}
	v.checked = append(v.checked, fmt.Sprintf("≥ %.1f%%", 100*bar))
	for i, path := range probePaths {
		if shares[i] < bar {
			v.missed = append(v.missed, fmt.Sprintf("%s %.2f%% < %.1f%%", path, 100*shares[i], 100*bar))
		}
	}
	return v
}

// judge holds r to l's bars: the probe bar; on health's row, with the
// server's figures (not with -addr), the CPU bar when plain, the same
// load's plain figures, were measured beside it (-server both), and the
// server bounds. Plain's row is held to the probe bar alone: it is the
// yardstick, not the package.
func judge(l load, r loadResult, plain *serverResult) verdict {
	v := probeVerdict(l.bar, r.shares)
	h := r.srv
	if r.server != serverHealth || h == nil {
		return v
	}
	if l.cpuBar > 0 && plain != nil {
		v.checked = append(v.checked, fmt.Sprintf("CPU ≤ %s plain's", multiple(l.cpuBar)))
		switch {
		case h.cores < 0 || plain.cores < 0:
			v.missed = append(v.missed, "CPU not measured")
		case h.cores > l.cpuBar*plain.cores:
			v.missed = append(v.missed, fmt.Sprintf("CPU %s > %s plain's %s", formatCores(h.cores), multiple(l.cpuBar), formatCores(plain.cores)))
		}
	}
	v.checked = append(v.checked, "server bounds")
	switch {
	case h.heapKiB < 0:
		v.missed = append(v.missed, "live heap not measured")
	case h.heapKiB > maxLiveHeapKiB:
		v.missed = append(v.missed, fmt.Sprintf("live heap %.1f MiB > %d MiB", float64(h.heapKiB)/1024, maxLiveHeapKiB>>10))
	}
	if h.goroutines > maxGoroutines {
		v.missed = append(v.missed, fmt.Sprintf("%d goroutines > %d", h.goroutines, maxGoroutines))
	}
	if h.logLines > maxLogLines {
		v.missed = append(v.missed, fmt.Sprintf("%d log lines > %d", h.logLines, maxLogLines))
	}
	if h.shutdownMs > float64(maxShutdown.Milliseconds()) {
		v.missed = append(v.missed, fmt.Sprintf("Serve returned after %.0f ms > %.0f s", h.shutdownMs, maxShutdown.Seconds()))
	}
	return v
}

// multiple prints a CPU bar as a multiple, with a decimal even when whole
// (1.0×), as the tables' ratios are printed, and every digit given.
func multiple(x float64) string {
	s := strconv.FormatFloat(x, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s + "×"
}

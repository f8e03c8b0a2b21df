package main

import (
	"fmt"
	"strings"
)

// loadResult is what one load did to one server: a row of the table.
type loadResult struct {
	name                      string // the load column: its name
	server                    string // serverHealth or serverPlain
	healthz, readyz, p50, p99 string // probeCells'
	shares                    [2]float64
	verdict                   verdict // judge's, once both servers have run
	attack                    attackResult
	kernel                    kernelCounters
	srv                       *serverResult // nil when the server was started elsewhere (-addr)
}

// loadColumns is the table's header. With both servers (-server both), a
// column says which server a row is, and one beside the server's CPU
// gives health's CPU as a multiple of plain's under the same load: what
// the package costs over net/http alone is the figure the comparison is
// for, and a ratio reads the same at every CPU limit.
func loadColumns(both bool) []string {
	cols := []string{"load"}
	if both {
		cols = append(cols, "server")
	}
	cols = append(cols, "/healthz ok", "/readyz ok", "p50", "p99", "attacker connects/s", "attacker connects failed",
		"kernel: accept queue overflows / SYN queue full (cookies, drops)",
		"server peak RSS", "server peak live heap", "server peak goroutines", "server log lines (WARN+)", "server CPU (cores busy)")
	if both {
		cols = append(cols, "health's CPU ÷ plain's")
	}
	return append(cols, "server evictions/s", "Serve returned after cancel", "bar")
}

// formatRow is r's row under loadColumns(both), ratio being the CPU ratio
// cell, which only the table of both servers has.
func formatRow(r loadResult, both bool, ratio string) string {
	cells := []string{r.name}
	if both {
		cells = append(cells, r.server)
	}
	cells = append(cells, r.healthz, r.readyz, r.p50, r.p99,
		fmt.Sprintf("%.0f", r.attack.rate()), fmt.Sprint(r.attack.dialErrors),
		fmt.Sprintf("%d / %d, %d", r.kernel.listenOverflows, r.kernel.synQueueCookies, r.kernel.synQueueDrops))
	srv := serverCells(r.srv)
	cells = append(cells, srv[:5]...) // RSS, live heap, goroutines, log lines, CPU
	if both {
		cells = append(cells, ratio)
	}
	cells = append(cells, srv[5:]...)
	cells = append(cells, r.verdict.cell())
	return "| " + strings.Join(cells, " | ") + " |"
}

// formatBoth is a load's two rows, health's then plain's, the ratio of
// their CPU on health's.
func formatBoth(health, plain loadResult) string {
	return formatRow(health, true, cpuRatio(health.srv, plain.srv)) + "\n" + formatRow(plain, true, "—")
}

// cpuRatio is health's CPU over plain's; n/a when either was not measured
// or plain's is nothing, of which no multiple means anything.
func cpuRatio(health, plain *serverResult) string {
	if health == nil || plain == nil || health.cores < 0 || plain.cores <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f×", health.cores/plain.cores)
}

// serverCells formats the server's peak RSS, peak live heap, peak
// goroutines, log lines, CPU, evictions a second and shutdown time; n/a
// for each when r is nil, and for a figure not measured.
func serverCells(r *serverResult) []string {
	if r == nil {
		return []string{"n/a", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a"}
	}
	heap, evictions := "n/a", "n/a"
	if r.heapKiB >= 0 {
		heap = fmt.Sprintf("%.1f MiB", float64(r.heapKiB)/1024)
	}
	if r.evictions >= 0 {
		evictions = fmt.Sprintf("%.0f", r.evictions)
	}
	return []string{fmt.Sprintf("%.1f MiB", float64(r.rssKiB)/1024), heap, fmt.Sprint(r.goroutines), fmt.Sprint(r.logLines), formatCores(r.cores), evictions, fmt.Sprintf("%.0f ms", r.shutdownMs)}
}

// tableHead returns a markdown table's header row and the delimiter row
// beneath it, which must have as many cells, or the table is not drawn.
func tableHead(columns ...string) string {
	return "| " + strings.Join(columns, " | ") + " |\n|" + strings.Repeat("---|", len(columns))
}

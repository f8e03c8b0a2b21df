package main

import (
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sampleResult is a row as runLoad fills it and judge judges it, with
// the server's CPU given.
func sampleResult(server string, cores float64, passed bool) loadResult {
	v := verdict{checked: []string{"≥ 99.9%"}}
	if !passed {
		v.missed = []string{"/readyz 99.50% < 99.9%"}
	}
	return loadResult{
		name: "1,000 slowloris + 1,000 idle, server at 0.25 cores", server: server,
		healthz: "100.00% (200/200)", readyz: "99.50% (199/200)", p50: "7.5 ms", p99: "34.2 ms",
		shares: [2]float64{1, 0.995}, verdict: v,
		attack: attackResult{dials: 1000, seconds: 10, dialErrors: 3},
		kernel: kernelCounters{listenOverflows: 1, synQueueCookies: 2, synQueueDrops: 4},
		srv:    &serverResult{goroutines: 260, rssKiB: 17510, heapKiB: 2150, logLines: 3, shutdownMs: 5, cores: cores, evictions: 17276},
	}
}

// Each row has a cell for every column, in both tables.
func TestLoadTableShape(t *testing.T) {
	for _, both := range []bool{false, true} {
		cols := loadColumns(both)
		row := formatRow(sampleResult(serverHealth, 0.5, true), both, "2.0×")
		assert.Equal(t, len(cols), strings.Count(row, " | ")+1, "both=%v: %s", both, row)
		assert.Equal(t, len(cols), strings.Count(tableHead(cols...), "---|"))
	}
	for _, both := range []bool{false, true} {
		cols := loadColumns(both)
		assert.Equal(t, indexOf(cols, "server peak RSS")+1, indexOf(cols, "server peak live heap"), "both=%v: beside the RSS", both)
	}
	assert.Equal(t, "server", loadColumns(true)[1])
	assert.NotContains(t, loadColumns(false), "server")
	assert.NotContains(t, loadColumns(false), "health's CPU ÷ plain's")
}

// One server: the row as it always was.
func TestFormatRowOneServer(t *testing.T) {
	assert.Equal(t, "| 1,000 slowloris + 1,000 idle, server at 0.25 cores | 100.00% (200/200) | 99.50% (199/200) | 7.5 ms | 34.2 ms | 100 | 3 | 1 / 2, 4 | 17.1 MiB | 2.1 MiB | 260 | 3 | 0.25 | 17276 | 5 ms | ≥ 99.9%: pass |",
		formatRow(sampleResult(serverHealth, 0.25, true), false, "ignored"))
	// Started elsewhere (-addr): every server cell n/a.
	r := sampleResult(serverHealth, 0, false)
	r.srv = nil
	assert.Equal(t, "| 1,000 slowloris + 1,000 idle, server at 0.25 cores | 100.00% (200/200) | 99.50% (199/200) | 7.5 ms | 34.2 ms | 100 | 3 | 1 / 2, 4 | n/a | n/a | n/a | n/a | n/a | n/a | n/a | ≥ 99.9%: FAIL: /readyz 99.50% < 99.9% |",
		formatRow(r, false, ""))
}

// Both servers: a row each, health's first, the server named, and the
// ratio of health's CPU to plain's beside the CPU on health's row.
func TestFormatBoth(t *testing.T) {
	out := formatBoth(sampleResult(serverHealth, 0.24, true), sampleResult(serverPlain, 0.06, false))
	rows := strings.Split(out, "\n")
	require.Len(t, rows, 2)
	assert.Equal(t, "| 1,000 slowloris + 1,000 idle, server at 0.25 cores | health | 100.00% (200/200) | 99.50% (199/200) | 7.5 ms | 34.2 ms | 100 | 3 | 1 / 2, 4 | 17.1 MiB | 2.1 MiB | 260 | 3 | 0.24 | 4.0× | 17276 | 5 ms | ≥ 99.9%: pass |", rows[0])
	assert.Equal(t, "| 1,000 slowloris + 1,000 idle, server at 0.25 cores | plain | 100.00% (200/200) | 99.50% (199/200) | 7.5 ms | 34.2 ms | 100 | 3 | 1 / 2, 4 | 17.1 MiB | 2.1 MiB | 260 | 3 | 0.06 | — | 17276 | 5 ms | ≥ 99.9%: FAIL: /readyz 99.50% < 99.9% |", rows[1])
	// The ratio lines up under its column.
	cols := loadColumns(true)
	cells := strings.Split(strings.Trim(rows[0], "| "), " | ")
	require.Len(t, cells, len(cols))
	for i, want := range map[string]string{"server": "health", "server peak RSS": "17.1 MiB", "server peak live heap": "2.1 MiB", "server peak goroutines": "260", "server log lines (WARN+)": "3", "server CPU (cores busy)": "0.24", "health's CPU ÷ plain's": "4.0×", "bar": "≥ 99.9%: pass"} {
		idx := indexOf(cols, i)
		require.GreaterOrEqual(t, idx, 0, i)
		assert.Equal(t, want, cells[idx], i)
	}
}

func indexOf(xs []string, x string) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}

func TestCPURatio(t *testing.T) {
	r := func(c float64) *serverResult { return &serverResult{cores: c} }
	assert.Equal(t, "12.2×", cpuRatio(r(0.73), r(0.06)))
	assert.Equal(t, "1.0×", cpuRatio(r(0.25), r(0.25)))
	assert.Equal(t, "0.5×", cpuRatio(r(0.05), r(0.1)))
	assert.Equal(t, "0.0×", cpuRatio(r(0), r(0.1)))
	assert.Equal(t, "n/a", cpuRatio(r(0.5), r(0)), "no multiple of nothing")
	assert.Equal(t, "n/a", cpuRatio(r(-1), r(0.1)), "not measured")
	assert.Equal(t, "n/a", cpuRatio(r(0.5), r(-1)))
	assert.Equal(t, "n/a", cpuRatio(nil, r(0.1)))
	assert.Equal(t, "n/a", cpuRatio(r(0.1), nil))
}

// What needs the server this command starts refuses -addr, naming the
// flag; and a load's limit is named when no cgroup can be made for it.
func TestLimitsNeedOwnServer(t *testing.T) {
	loads, err := selectLoads("slowloris-idle,slowloris-idle-0.05cpu", load{}, 0)
	require.NoError(t, err)
	assert.EqualError(t, needsOwnServer(loads, serverHealth), "load slowloris-idle-0.05cpu runs the server under a CPU limit of 0.05 cores, so it starts the server itself: leave -addr out")
	assert.EqualError(t, needsOwnServer(loads[:1], serverBoth), "-server both starts each server itself: leave -addr out")
	assert.NoError(t, needsOwnServer(loads[:1], serverPlain))
	assert.EqualError(t, runLoads("slowloris-idle", load{}, 0, "127.0.0.1:9101", serverBoth, 0), "-server both starts each server itself: leave -addr out")
	assert.EqualError(t, runLoads("slowloris-idle", load{}, 0, "10.0.0.1:9101", serverHealth, 0.25), `address "10.0.0.1:9101": only loopback IP addresses may be targeted`)
	assert.EqualError(t, runLoads("mix-noloops-0.25cpu", load{}, 0, "127.0.0.1:9101", serverHealth, 0), "load mix-noloops-0.25cpu runs the server under a CPU limit of 0.25 cores, so it starts the server itself: leave -addr out")

	first, what := loadsLimit(loads, 0)
	assert.Equal(t, 0.05, first)
	assert.Equal(t, "the CPU limit of load slowloris-idle-0.05cpu", what)
	loads, err = selectLoads("slowloris-idle,slowloris-idle-0.25cpu,slowloris-idle-0.05cpu,custom", load{}, 0.5)
	require.NoError(t, err)
	first, what = loadsLimit(loads, 0.5)
	assert.Equal(t, 0.5, first)
	assert.Equal(t, "the CPU limits of loads slowloris-idle, slowloris-idle-0.25cpu, slowloris-idle-0.05cpu, custom (-cpus 0.5)", what)
	first, _ = loadsLimit(loads[:1], 0)
	assert.Equal(t, 0.5, first)
	loads, err = selectLoads("slowloris-idle,slowloris-idle-fd1024", load{}, 0)
	require.NoError(t, err)
	first, _ = loadsLimit(loads, 0)
	assert.Zero(t, first, "no limit, no cgroup")
	cg, release, err := cpuCgroupFor(0, "")
	assert.NoError(t, err)
	assert.Nil(t, cg)
	assert.NoError(t, release())
}

// The live heap is read from runtime/metrics, which has it on this Go:
// after a collection, the heap it marked, never the -1 of no figure.
func TestLiveHeap(t *testing.T) {
	runtime.GC()
	h := newLiveHeap()
	assert.Positive(t, h.bytes())
	assert.Positive(t, h.bytes(), "the samples are reused")
}

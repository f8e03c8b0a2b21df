package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The bar cell names the bars a row was held to, and on a miss which
// missed and by what figure.
func TestVerdictCell(t *testing.T) {
	for _, tc := range []struct {
		v    verdict
		want string
	}{
		{verdict{}, "report only"},
		{verdict{checked: []string{"≥ 99.9%"}}, "≥ 99.9%: pass"},
		{verdict{checked: []string{"≥ 99.0%", "server bounds"}, missed: []string{"/healthz 98.00% < 99.0%", "6 goroutines > 4"}},
			"≥ 99.0%, server bounds: FAIL: /healthz 98.00% < 99.0%; 6 goroutines > 4"},
		{verdict{checked: []string{"server bounds"}, missed: []string{"11 log lines > 10"}}, "server bounds: FAIL: 11 log lines > 10"},
	} {
		assert.Equal(t, tc.want, tc.v.cell())
		assert.Equal(t, len(tc.v.missed) == 0, tc.v.passed())
	}
}

// judge holds health's row to the probe bar, the CPU bar beside plain and
// the server bounds; plain's to the probe bar alone.
func TestJudge(t *testing.T) {
	bounded := serverResult{goroutines: 4, heapKiB: 16 << 10, logLines: 10, shutdownMs: 5000, cores: 0.5}
	plain := &serverResult{goroutines: 2000, heapKiB: 40 << 10, logLines: 500, shutdownMs: 5200, cores: 1}
	barred := load{bar: 0.999, cpuBar: 0.5}
	for _, tc := range []struct {
		name   string
		l      load
		server string
		shares [2]float64
		srv    *serverResult // nil: started elsewhere (-addr)
		plain  *serverResult // nil: no plain row beside it
		want   string
	}{
		{"health at every bound", barred, serverHealth, [2]float64{1, 0.999}, &bounded, plain,
			"≥ 99.9%, CPU ≤ 0.5× plain's, server bounds: pass"},
		{"health past every bound", barred, serverHealth, [2]float64{0.99, 1},
			&serverResult{goroutines: 5, heapKiB: 17 << 10, logLines: 11, shutdownMs: 5001, cores: 0.51}, plain,
			"≥ 99.9%, CPU ≤ 0.5× plain's, server bounds: FAIL: /healthz 99.00% < 99.9%; CPU 0.51 > 0.5× plain's 1.00; live heap 17.0 MiB > 16 MiB; 5 goroutines > 4; 11 log lines > 10; Serve returned after 5001 ms > 5 s"},
		{"figures not measured", barred, serverHealth, [2]float64{1, 1}, &serverResult{heapKiB: -1, cores: -1}, plain,
			"≥ 99.9%, CPU ≤ 0.5× plain's, server bounds: FAIL: CPU not measured; live heap not measured"},
		{"plain spent nothing", load{bar: 0.999, cpuBar: 1}, serverHealth, [2]float64{1, 1}, &serverResult{cores: 0.01}, &serverResult{},
			"≥ 99.9%, CPU ≤ 1.0× plain's, server bounds: FAIL: CPU 0.01 > 1.0× plain's 0.00"},
		{"no plain row: no CPU bar", barred, serverHealth, [2]float64{1, 1}, &bounded, nil,
			"≥ 99.9%, server bounds: pass"},
		{"no CPU bar of its own", load{bar: 0.97}, serverHealth, [2]float64{1, 1}, &bounded, plain,
			"≥ 97.0%, server bounds: pass"},
		{"custom, report only: the bounds still hold", load{}, serverHealth, [2]float64{0, 0}, &bounded, nil,
			"server bounds: pass"},
		{"started elsewhere: probes only", barred, serverHealth, [2]float64{1, 0.5}, nil, nil,
			"≥ 99.9%: FAIL: /readyz 50.00% < 99.9%"},
		{"plain is the yardstick", barred, serverPlain, [2]float64{0.2867, 0.2867}, plain, nil,
			"≥ 99.9%: FAIL: /healthz 28.67% < 99.9%; /readyz 28.67% < 99.9%"},
		{"plain, report only", load{}, serverPlain, [2]float64{0, 0}, plain, nil, "report only"},
	} {
		r := loadResult{server: tc.server, shares: tc.shares, srv: tc.srv}
		assert.Equal(t, tc.want, judge(tc.l, r, tc.plain).cell(), tc.name)
	}
}

func TestMultiple(t *testing.T) {
	for x, want := range map[float64]string{1: "1.0×", 0.5: "0.5×", 0.01: "0.01×", 1.25: "1.25×", 2: "2.0×"} {
		assert.Equal(t, want, multiple(x))
	}
}

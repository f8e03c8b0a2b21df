package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/health"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tool sends floods; it must refuse any target but loopback.
func TestRequireLoopback(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:9101", "127.1.2.3:80", "[::1]:9101"} {
		assert.NoError(t, requireLoopback(addr), addr)
	}
	for _, addr := range []string{"10.0.0.1:9101", "192.168.1.1:9101", "localhost:9101", "example.org:80", "[::]:9101", "0.0.0.0:9101", "9101", ""} {
		assert.Error(t, requireLoopback(addr), addr)
	}
}

func TestKinds(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range kinds {
		assert.Regexp(t, "^[a-z0-9]+$", k.Name)
		assert.NotEmpty(t, k.Help, k.Name)
		assert.False(t, seen[k.Name], "two kinds named %s", k.Name)
		seen[k.Name] = true
	}
	assert.Equal(t, "1,000 slowloris + 1,000 idle", counts{"slowloris": 1000, "idle": 1000}.describe())
	assert.Equal(t, "8,000 idle + 8 churn loops", synCookies.describe())
	assert.Equal(t, "churn (one loop per core) + 5 tls", counts{"churn": -1, "tls": 5}.describe())
	assert.Equal(t, "no attackers", counts{}.describe())
	assert.EqualError(t, counts{"nosuch": 1}.check(), `no attacker kind "nosuch"`)
}

// maxrequest is a request Serve answers: valid, and within its cap of
// 4,095 bytes, close to it.
func TestMaxRequest(t *testing.T) {
	raw := maxRequest.Request
	assert.Greater(t, len(raw), 3900)
	assert.LessOrEqual(t, len(raw), 4095)
	assert.Equal(t, 62, strings.Count(raw, "\n"))
	req := parseRequest(t, []byte(raw))
	assert.Equal(t, "/readyz", req.URL.Path)
	assert.True(t, req.URL.Query().Has("verbose"))
	assert.True(t, strings.HasSuffix(raw, "\r\n\r\n"))

	srv := health.NewServer(health.Config{Listen: "127.0.0.1:0"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	srv.SetRegistered()
	srv.SetDataPlaneReady()
	ln, err := srv.Listen()
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	defer func() { cancel(); assert.NoError(t, <-served) }()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = io.WriteString(c, raw)
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, 200, resp.StatusCode)
	assert.True(t, strings.HasSuffix(string(body), "readyz check passed\n"), "%q", body)
}

func TestThousands(t *testing.T) {
	for n, want := range map[int]string{0: "0", 7: "7", 999: "999", 1000: "1,000", 12345: "12,345", 1234567: "1,234,567", -2000: "-2,000"} {
		assert.Equal(t, want, thousands(n))
	}
}

// parseRequest reads the first request of b as net/http's server would,
// with no limit on the header.
func parseRequest(t *testing.T, b []byte) *http.Request {
	t.Helper()
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(b)))
	require.NoError(t, err)
	return req
}

func TestCoresBusy(t *testing.T) {
	t0 := time.Unix(1000, 0)
	start := cpuSample{wall: t0, cpu: 3 * time.Second}
	assert.InDelta(t, 0.67, coresBusy(start, cpuSample{wall: t0.Add(20 * time.Second), cpu: 3*time.Second + 13400*time.Millisecond}), 1e-9)
	assert.InDelta(t, 2.0, coresBusy(start, cpuSample{wall: t0.Add(time.Second), cpu: 5 * time.Second}), 1e-9)
	assert.Zero(t, coresBusy(start, cpuSample{wall: t0.Add(time.Second), cpu: 3 * time.Second}))
	// A missing or out-of-order sample is not a figure.
	assert.Negative(t, coresBusy(cpuSample{}, start))
	assert.Negative(t, coresBusy(start, cpuSample{}))
	assert.Negative(t, coresBusy(start, start))
	assert.Negative(t, coresBusy(cpuSample{wall: t0.Add(time.Second)}, start))

	assert.Equal(t, "0.67", formatCores(0.6666))
	assert.Equal(t, "0.04", formatCores(0.04))
	assert.Equal(t, "0.00", formatCores(0))
	assert.Equal(t, "n/a", formatCores(-1))
}

// The child processes' lines round-trip through their parsers.
func TestResultLines(t *testing.T) {
	sr := serverResult{goroutines: 293, rssKiB: 17920, heapKiB: 1126, logLines: 12, shutdownMs: 12.5, cores: 0.671, evictions: 3906.5}
	line, ok := strings.CutPrefix(sr.String(), "result ")
	require.True(t, ok)
	assert.Equal(t, "goroutines=293 rss_kib=17920 heap_kib=1126 log_lines=12 shutdown_ms=12.5 cpu_cores=0.671 evictions_per_s=3906.5", line)
	got, err := parseServerResult(line)
	require.NoError(t, err)
	assert.Equal(t, sr, got)
	assert.Equal(t, "17.5 MiB | 1.1 MiB | 293 | 12 | 0.67 | 3906 | 12 ms", strings.Join(serverCells(&got), " | "))
	got, err = parseServerResult("goroutines=5 rss_kib=6000 heap_kib=-1 log_lines=0 shutdown_ms=0.4 cpu_cores=-1.000 evictions_per_s=-1.0")
	require.NoError(t, err)
	assert.EqualValues(t, -1, got.heapKiB)
	assert.Equal(t, "n/a", formatCores(got.cores))
	assert.Equal(t, "5.9 MiB | n/a | 5 | 0 | n/a | n/a | 0 ms", strings.Join(serverCells(&got), " | "))
	assert.Equal(t, "n/a | n/a | n/a | n/a | n/a | n/a | n/a", strings.Join(serverCells(nil), " | "))
	// Older children, without the log lines or more: refused, not misread.
	for _, old := range []string{
		"goroutines=5 rss_kib=6000 heap_kib=-1 shutdown_ms=0.4 cpu_cores=-1.000 evictions_per_s=-1.0",
		"goroutines=5 rss_kib=6000 shutdown_ms=0.4 cpu_cores=-1.000 evictions_per_s=-1.0",
		"goroutines=5 rss_kib=6000 shutdown_ms=0.4 cpu_cores=0.5",
	} {
		_, err = parseServerResult(old)
		assert.Error(t, err, old)
	}

	ar := attackResult{dials: 12345, seconds: 23.5, dialErrors: 2}
	line, ok = strings.CutPrefix(ar.String(), "result ")
	require.True(t, ok)
	gotA, err := parseAttackResult(line)
	require.NoError(t, err)
	assert.Equal(t, ar, gotA)
	assert.InDelta(t, 12345/23.5, gotA.rate(), 1e-9)
	assert.Zero(t, attackResult{dials: 5}.rate())
	_, err = parseAttackResult("dials=x")
	assert.Error(t, err)

	s := snapshot{rssKiB: 7000, anonKiB: 3000, heapKiB: 300, goroutines: 9, fds: 11, held: 2}
	line, ok = strings.CutPrefix(s.String(), "snapshot ")
	require.True(t, ok)
	gotS, err := parseSnapshot(line)
	require.NoError(t, err)
	assert.Equal(t, s, gotS)
	_, err = parseSnapshot("rss_kib=1")
	assert.Error(t, err)
}

// The attack child gets a flag for every kind, and the counts it is given.
func TestAttackArgs(t *testing.T) {
	args := attackArgs("127.0.0.1:9101", hostileMix, 33*time.Second)
	assert.Equal(t, []string{"-role=attack", "--"}, args[:2])
	fs, f := attackFlags()
	require.NoError(t, fs.Parse(args[2:]))
	assert.Equal(t, "127.0.0.1:9101", f.addr)
	assert.Equal(t, hostileMix, f.clients)
	assert.Contains(t, args, "-churn")
	assert.NotContains(t, args, "-maxrequest", "counts of 0 are left out")
	assert.Equal(t, 33*time.Second, f.duration)
	assert.EqualValues(t, 20_000_000, f.maxDials, "bounded by default")
	assert.Empty(t, fs.Args())
}

func TestSummary(t *testing.T) {
	var os []outcome
	for i := 1; i <= 100; i++ {
		os = append(os, outcome{ok: i != 50, latency: time.Duration(i) * time.Millisecond})
	}
	share, p50, p99 := summary(os)
	assert.Equal(t, 0.99, share)
	assert.Equal(t, 51*time.Millisecond, p50)
	assert.Equal(t, 100*time.Millisecond, p99)
	share, _, _ = summary(nil)
	assert.Zero(t, share)
}

// The soak is bounded, and refuses what it could not measure; these
// return before starting anything.
func TestSoakBounds(t *testing.T) {
	assert.ErrorContains(t, runSoak(-time.Second, serverHealth, "", 0), "want more than 0")
	assert.ErrorContains(t, runSoak(2*time.Hour, serverHealth, "", 0), "at most 1h0m0s")
	assert.ErrorContains(t, runSoak(time.Minute, serverHealth, "127.0.0.1:9101", 0), "leave -addr out")
	assert.EqualError(t, runSoak(time.Minute, serverBoth, "", 0), "-soak runs one server: -server health or plain, not both")
}

// A table's delimiter row has a cell for each column of its header, or
// markdown does not draw the table.
func TestTableHead(t *testing.T) {
	assert.Equal(t, "| a | b c |\n|---|---|", tableHead("a", "b c"))
	assert.Equal(t, "| a |\n|---|", tableHead("a"))
}

package main

import (
	"bufio"
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

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

func TestSelectLoads(t *testing.T) {
	custom := load{clients: counts{kindSlowloris: 10, kindIdle: 20, kindChurn: -1}, serverNofile: 512, probeDelay: 5 * time.Millisecond}
	loads, err := selectLoads("4, 1,custom", custom)
	require.NoError(t, err)
	require.Len(t, loads, 3)
	assert.Equal(t, 4, loads[0].id)
	assert.Equal(t, 1, loads[1].id)
	assert.Equal(t, "custom: 10 slowloris + 20 idle + -1 churn, server fd limit 512, probe delay 5ms", loads[2].name)
	assert.Equal(t, 20, loads[2].clients[kindIdle])

	custom.clients[kindOptions] = 5
	custom.clients[kindNoRead] = 7
	loads, err = selectLoads("custom", custom)
	require.NoError(t, err)
	assert.Equal(t, "custom: 10 slowloris + 20 idle + -1 churn + 5 options + 7 noread, server fd limit 512, probe delay 5ms", loads[0].name)

	_, err = selectLoads("11", custom)
	assert.EqualError(t, err, `-load: no load "11" (have 1 to 10, and custom)`)
}

// The default runs every load, and the loads are numbered 1, 2, ... in
// order, so that -load N is the table's row N.
func TestAllLoads(t *testing.T) {
	loads, err := selectLoads(allLoadIDs(), load{})
	require.NoError(t, err)
	require.Len(t, loads, 10)
	for i, l := range loads {
		assert.Equal(t, i+1, l.id)
		assert.NotEmpty(t, l.name)
		assert.NotEqual(t, counts{}, l.clients, l.name)
		assert.GreaterOrEqual(t, l.bar, 0.99, l.name)
	}
	// Loads 1 to 5 are as they were.
	assert.Equal(t, counts{kindSlowloris: 1000, kindIdle: 1000}, loads[0].clients)
	assert.Equal(t, 1024, loads[1].serverNofile)
	assert.Equal(t, counts{kindChurn: -1}, loads[2].clients)
	assert.Equal(t, 20*time.Millisecond, loads[3].probeDelay)
	assert.Equal(t, 0.99, loads[3].bar)
	assert.Equal(t, counts{kindSlowloris: 5000, kindIdle: 5000}, loads[4].clients)
	assert.Equal(t, 0.999, loads[4].bar, "now held to the bar of the others")
	// The new ones.
	assert.Equal(t, counts{kindOptions: 2000}, loads[5].clients)
	assert.Equal(t, counts{kindBigHeader: 2000}, loads[6].clients)
	assert.Equal(t, counts{kindHugeBody: 2000}, loads[7].clients)
	assert.Equal(t, 128, loads[9].serverNofile)
	assert.Equal(t, counts{kindSlowloris: 1000, kindIdle: 1000}, loads[9].clients)
	for _, l := range loads[5:] {
		assert.Equal(t, 0.999, l.bar, l.name)
	}
}

// The hostile mix runs every kind, with 2,000 to 3,000 clients in all.
func TestHostileMix(t *testing.T) {
	for k, n := range hostileMix {
		assert.NotZero(t, n, kind(k).String())
	}
	assert.Equal(t, -1, hostileMix[kindChurn], "one churn loop per core")
	assert.GreaterOrEqual(t, hostileMix.total(), 2000)
	assert.LessOrEqual(t, hostileMix.total(), 3000)
	assert.Equal(t, allLoads[8].clients, hostileMix)
	assert.Contains(t, allLoads[8].name, "3,000 clients + churn")
}

func TestKinds(t *testing.T) {
	seen := map[string]bool{}
	for k := range kinds {
		name := kind(k).String()
		assert.NotEmpty(t, name)
		assert.NotEmpty(t, kinds[k].help, name)
		assert.False(t, seen[name], "two kinds named %s", name)
		seen[name] = true
	}
	assert.Equal(t, "1,000 slowloris + 1,000 idle", counts{kindSlowloris: 1000, kindIdle: 1000}.describe())
	assert.Equal(t, "churn (one loop per core) + 5 tls", counts{kindChurn: -1, kindTLS: 5}.describe())
	assert.Equal(t, "no attackers", counts{}.describe())
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

func TestRequestBytes(t *testing.T) {
	// options: OPTIONS *, declaring a 4 KiB body it does not send.
	req := parseRequest(t, request(kindOptions))
	assert.Equal(t, "OPTIONS", req.Method)
	assert.Equal(t, "*", req.RequestURI)
	assert.Equal(t, "127.0.0.1", req.Host)
	assert.EqualValues(t, 4096, req.ContentLength)
	assert.True(t, bytes.HasSuffix(request(kindOptions), []byte("\r\n\r\n")), "the header is complete, the body absent")

	// bigheader: a complete request whose header is over 8 KiB, past
	// MaxHeaderBytes (4 KiB) and the 4 KiB net/http reads beyond it.
	big := request(kindBigHeader)
	head, _, found := bytes.Cut(big, []byte("\r\n\r\n"))
	assert.True(t, found)
	assert.Greater(t, len(head), 8<<10)
	assert.Greater(t, len(head), 4096+4096)
	assert.Less(t, len(head), 16<<10, "about 12 KiB")
	assert.Equal(t, "GET", parseRequest(t, big).Method)

	// hugebody: POST /healthz declaring 1 TiB.
	req = parseRequest(t, request(kindHugeBody))
	assert.Equal(t, "POST", req.Method)
	assert.Equal(t, "/healthz", req.URL.Path)
	assert.EqualValues(t, int64(1)<<40, req.ContentLength)
	assert.Contains(t, string(request(kindHugeBody)), "Content-Length: 1099511627776\r\n")
	assert.True(t, bytes.HasSuffix(request(kindHugeBody), []byte("\r\n\r\n")))

	// smallbody: POST /readyz declaring 1000 bytes it does not send.
	req = parseRequest(t, request(kindSmallBody))
	assert.Equal(t, "POST", req.Method)
	assert.Equal(t, "/readyz", req.URL.Path)
	assert.EqualValues(t, 1000, req.ContentLength)
	assert.True(t, bytes.HasSuffix(request(kindSmallBody), []byte("\r\n\r\n")))

	// expect: a body announced with Expect: 100-continue, never sent.
	req = parseRequest(t, request(kindExpect))
	assert.Equal(t, "100-continue", req.Header.Get("Expect"))
	assert.Positive(t, req.ContentLength)
	assert.True(t, bytes.HasSuffix(request(kindExpect), []byte("\r\n\r\n")))

	// pipeline: several complete requests in one write.
	r := bufio.NewReader(bytes.NewReader(request(kindPipeline)))
	n := 0
	for ; ; n++ {
		req, err := http.ReadRequest(r)
		if err != nil {
			break
		}
		assert.Equal(t, "/healthz", req.URL.Path)
	}
	assert.Equal(t, pipelined, n)
	assert.Greater(t, n, 1)

	// halfclose: a partial request, without the blank line that ends it.
	half := string(request(kindHalfClose))
	assert.True(t, strings.HasPrefix(half, "GET /healthz HTTP/1.1\r\n"))
	assert.NotContains(t, half, "\r\n\r\n")

	// h2: exactly the client preface.
	assert.Equal(t, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", string(request(kindH2)))

	// noread: one complete GET.
	req = parseRequest(t, request(kindNoRead))
	assert.Equal(t, "GET", req.Method)
	assert.Equal(t, "/healthz", req.URL.Path)

	// The kinds that write nothing up front, or as they go.
	for _, k := range []kind{kindSlowloris, kindIdle, kindChurn, kindTLS} {
		assert.Nil(t, request(k), k.String())
	}
}

// The tls kind sends a real ClientHello: one TLS handshake record holding
// a ClientHello message.
func TestClientHello(t *testing.T) {
	hello, err := clientHello()
	require.NoError(t, err)
	require.Greater(t, len(hello), 9)
	assert.Equal(t, byte(0x16), hello[0], "record type handshake")
	assert.Equal(t, byte(0x03), hello[1], "TLS major version")
	assert.Equal(t, len(hello)-5, int(hello[3])<<8|int(hello[4]), "the record is whole")
	assert.Equal(t, byte(0x01), hello[5], "handshake type ClientHello")
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
	sr := serverResult{goroutines: 293, rssKiB: 17920, shutdownMs: 12.5, cores: 0.671}
	line, ok := strings.CutPrefix(sr.String(), "result ")
	require.True(t, ok)
	got, err := parseServerResult(line)
	require.NoError(t, err)
	assert.Equal(t, sr, got)
	got, err = parseServerResult("goroutines=5 rss_kib=6000 shutdown_ms=0.4 cpu_cores=-1.000")
	require.NoError(t, err)
	assert.Equal(t, "n/a", formatCores(got.cores))
	assert.Equal(t, "5.9 MiB | 5 | n/a | 0 ms", serverCells(got))
	_, err = parseServerResult("goroutines=5 rss_kib=6000 shutdown_ms=0.4") // an old child
	assert.Error(t, err)

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

func TestBarCell(t *testing.T) {
	assert.Equal(t, "report only", barCell(0, true))
	assert.Equal(t, "≥ 99.9%: pass", barCell(0.999, true))
	assert.Equal(t, "≥ 99.0%: FAIL", barCell(0.99, false))
}

// The attack child gets a flag for every kind, and the counts it is given.
func TestAttackArgs(t *testing.T) {
	args := attackArgs("127.0.0.1:9101", hostileMix, 33*time.Second)
	assert.Equal(t, []string{"-role=attack", "--"}, args[:2])
	fs, f := attackFlags()
	require.NoError(t, fs.Parse(args[2:]))
	assert.Equal(t, "127.0.0.1:9101", f.addr)
	assert.Equal(t, hostileMix, f.clients)
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
	assert.ErrorContains(t, runSoak(-time.Second, serverHealth, ""), "want more than 0")
	assert.ErrorContains(t, runSoak(2*time.Hour, serverHealth, ""), "at most 1h0m0s")
	assert.ErrorContains(t, runSoak(time.Minute, serverHealth, "127.0.0.1:9101"), "leave -addr out")
}

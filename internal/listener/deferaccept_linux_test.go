package listener

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshnode/health/internal/probetest"
)

// TestDeferredAcceptFromTheStart checks that the kernel holds silent
// connections from the first moment, not only once a flood has begun, so
// that a probe that writes late survives the first seconds of one:
// Listen's socket defers accept before any Serve (a client that connects
// between the agent's Listen and its Serve is held too), and Serve defers
// it on a listener made without, as net.Listen makes one, before it takes
// a connection.
func TestDeferredAcceptFromTheStart(t *testing.T) {
	ln, err := Listen("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	// The kernel reports the wait rounded up to its retransmission
	// schedule: 31 s for the 30 asked. A wait as short as the header
	// timeout's (3 s once rounded) would let silent clients come back
	// through Accept ten times as often.
	assert.GreaterOrEqual(t, deferAcceptSeconds(t, ln), 30, "Listen's TCP_DEFER_ACCEPT, before Serve")

	plain := probetest.Listen(t)
	require.Zero(t, deferAcceptSeconds(t, plain), "net.Listen defers nothing")
	s := serveTest(t, plain, Options{})
	// A probe answered proves Serve is past its setup.
	status, _, err := probetest.KubeletProbe(s.addr, "/healthz")
	require.NoError(t, err)
	require.Equal(t, 200, status)
	assert.GreaterOrEqual(t, deferAcceptSeconds(t, plain), 30, "TCP_DEFER_ACCEPT as Serve set it")
	require.NoError(t, s.stop())
	assert.Zero(t, probetest.Count(s.logs.String(), "cannot defer accept"))
}

// deferAcceptSeconds is ln's TCP_DEFER_ACCEPT, as the kernel reports it.
func deferAcceptSeconds(t *testing.T, ln net.Listener) int {
	t.Helper()
	rc, err := ln.(syscall.Conn).SyscallConn()
	require.NoError(t, err)
	var seconds int
	var serr error
	require.NoError(t, rc.Control(func(fd uintptr) {
		seconds, serr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_DEFER_ACCEPT)
	}))
	require.NoError(t, serr)
	return seconds
}

// TestSlowProbeSurvivesChurn is probeflood's load 4 in miniature, where
// the slots hold what waits (no room, as outside Linux): a probe whose
// request comes late, after many newer connections have churned through a
// full pool. The kernel keeps the silent probe connection until
// its request arrives, so it is never the oldest waiting connection in the
// pool; a limiter that accepted it at once would have evicted it.
func TestSlowProbeSurvivesChurn(t *testing.T) {
	floodTest(t)
	const limit = 16
	addr := serveTest(t, nil, Options{Limit: limit, room: -1}).addr

	first := make([]net.Conn, limit)
	for i := range first {
		first[i] = dialStalled(t, addr)
	}
	probe, err := net.Dial("tcp", addr) // handshake done, request not yet sent
	require.NoError(t, err)
	defer probe.Close()

	// Churn: each newcomer evicts the oldest waiting connection, so the
	// whole first batch goes, and then the oldest of the churn itself. Had
	// the probe been accepted when it connected, it would have been among
	// the victims. This has to happen within the deferral
	// (deferAcceptTimeout), after which the kernel hands the silent probe
	// over anyway; it takes a small fraction of that.
	churn := make([]net.Conn, 2*limit)
	for i := range churn {
		churn[i] = dialStalled(t, addr)
	}
	assert.True(t, probetest.ClosedByServer(churn[limit/2]), "the churn's own eviction")

	_, err = io.WriteString(probe, "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	_ = probe.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(probe)
	require.NoError(t, err, "%q", got)
	assert.True(t, strings.HasPrefix(string(got), "HTTP/1.1 200 OK\r\n"), "%q", got)
	assert.True(t, strings.HasSuffix(string(got), "\r\n\r\nok\n"), "%q", got)
}

// lowDescriptorChild is set in the environment of the child process that
// TestLowDescriptorLimit starts.
const lowDescriptorChild = "HEALTH_TEST_LOW_DESCRIPTOR_CHILD"

// TestLowDescriptorLimit serves from a child process whose descriptor limit
// is 64, floods it from this one with more stalled and silent clients than
// that, and probes: the bound is a quarter of the limit, so accept never
// runs out of descriptors, and every probe is answered.
func TestLowDescriptorLimit(t *testing.T) {
	if os.Getenv(lowDescriptorChild) != "" {
		serveWithLowDescriptorLimit()
		return
	}
	floodTest(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestLowDescriptorLimit$")
	cmd.Env = append(os.Environ(), lowDescriptorChild+"=1")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	out := bufio.NewScanner(stdout)
	require.True(t, out.Scan(), "the child's address; stderr: %s", &stderr)
	addr, ok := strings.CutPrefix(out.Text(), "addr ")
	require.True(t, ok, "%q", out.Text())

	stopStalled := flood(t, addr, 100, stalled)
	stopIdle := flood(t, addr, 100, idle)
	assertProbesAnswered(t, addr, 10)
	stopStalled()
	stopIdle()
	require.NoError(t, stdin.Close()) // the child stops serving and reports
	require.True(t, out.Scan(), "the child's report; stderr: %s", &stderr)
	assert.Equal(t, "limit=16 held=0 errors=0", out.Text(), "stderr: %s", &stderr)
	require.NoError(t, cmd.Wait())
}

// serveWithLowDescriptorLimit is the child: it lowers its descriptor
// limit, serves until its standard input closes, and reports the bound,
// the connections still held and the error lines it logged.
func serveWithLowDescriptorLimit() {
	fail := func(err error) { fmt.Fprintln(os.Stderr, err); os.Exit(1) }
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: 64, Max: 64}); err != nil {
		fail(err)
	}
	logs := new(probetest.LogBuffer)
	probes, counters := new(fakeProbes), new(Counters)
	probes.ready.Store(true)
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		fail(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	opts := Options{Handler: probes, Answer: probes.answer, Counters: counters, Log: logTo(logs), Limit: DefaultLimit()}
	go func() { done <- Serve(ctx, ln, opts) }()
	fmt.Printf("addr %s\n", ln.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	// The clients have gone; give their goroutines a moment to end.
	for i := 0; i < 10000 && counters.Held.Load() > 0; i++ {
		time.Sleep(time.Millisecond)
	}
	held, limit := counters.Held.Load(), counters.Limit.Load()
	cancel()
	if err := <-done; err != nil {
		fail(err)
	}
	fmt.Fprint(os.Stderr, logs.String())
	fmt.Printf("limit=%d held=%d errors=%d\n", limit, held, probetest.Count(logs.String(), "level=ERROR")+probetest.Count(logs.String(), "out of file descriptors"))
	os.Exit(0)
}

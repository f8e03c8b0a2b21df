package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/meshnode/health"
)

// TestMain fails the run if any goroutine outlives the tests: the demo
// must stop cleanly. A test calls goleak.VerifyNone itself only to wait
// for a goroutine to end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// demo is a running run() with pipes for its standard streams.
type demo struct {
	stdin  *io.PipeWriter
	lines  chan string
	stderr *syncBuffer
	addr   string
	code   chan int
	cancel context.CancelFunc
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func startDemo(t *testing.T, args ...string) *demo {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	d := &demo{stdin: inW, lines: make(chan string, 100), stderr: &syncBuffer{}, code: make(chan int, 1), cancel: cancel}
	go func() {
		d.code <- run(ctx, append([]string{"-listen", "127.0.0.1:0"}, args...), inR, outW, d.stderr)
		_ = outW.Close()
	}()
	go func() {
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			d.lines <- sc.Text()
		}
		close(d.lines)
	}()
	first := d.next(t)
	addr, ok := strings.CutPrefix(first, "healthdemo: serving on ")
	require.True(t, ok, "first line %q", first)
	d.addr = addr
	t.Cleanup(func() {
		cancel()
		_ = inW.Close()
	})
	return d
}

// next returns the demo's next line on standard output.
func (d *demo) next(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-d.lines:
		require.True(t, ok, "standard output closed")
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("no output from the demo")
		return ""
	}
}

// nextMatching skips lines until one starts with prefix.
func (d *demo) nextMatching(t *testing.T, prefix string) string {
	t.Helper()
	for {
		if l := d.next(t); strings.HasPrefix(l, prefix) {
			return l
		}
	}
}

func (d *demo) send(t *testing.T, line string) {
	t.Helper()
	_, err := io.WriteString(d.stdin, line+"\n")
	require.NoError(t, err)
}

func (d *demo) probe(t *testing.T, path string) (int, string) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + d.addr + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// eventuallyAnswers waits for /readyz to give this answer, as the demo's
// start-up clock runs.
func (d *demo) eventuallyAnswers(t *testing.T, status int, body string) {
	t.Helper()
	require.Eventually(t, func() bool {
		s, b := d.probe(t, "/readyz")
		return s == status && b == body
	}, 10*time.Second, 10*time.Millisecond, "readyz %d %q", status, body)
}

// eventuallyLogs waits for line in the demo's log: the package writes a
// line after it publishes the change the line reports, so a probe may see
// the change first.
func (d *demo) eventuallyLogs(t *testing.T, line string) {
	t.Helper()
	require.Eventually(t, func() bool {
		return strings.Contains(d.stderr.String(), line)
	}, 10*time.Second, time.Millisecond, "log line %q", line)
}

// stop cancels the demo, as SIGINT would, and closes its input, which ends
// its reader (a terminal's would end with the process).
func (d *demo) stop(t *testing.T) {
	t.Helper()
	d.cancel()
	_ = d.stdin.Close()
	select {
	case code := <-d.code:
		assert.Equal(t, 0, code)
	case <-time.After(10 * time.Second):
		t.Fatal("the demo did not stop")
	}
}

func TestDemoLifecycle(t *testing.T) {
	d := startDemo(t, "-register-after", "1s", "-dataplane-after", "50ms")

	status, body := d.probe(t, "/healthz")
	assert.Equal(t, 200, status)
	assert.Equal(t, "ok\n", body)
	status, body = d.probe(t, "/readyz")
	assert.Equal(t, 503, status, "probed before the registration clock runs out")
	assert.Equal(t, "not ready: registration pending\n", body)

	d.eventuallyAnswers(t, 200, "ok\n")

	d.send(t, "status")
	assert.Equal(t, "status: ready", d.nextMatching(t, "status:"))
	assert.Equal(t, "  unmet:  none", d.next(t))
	assert.Regexp(t, `^  check:  set; [1-9]\d* runs, 0 failed, 0 panicked, 0 stalled; the last took \S+ and returned at \d\d:\d\d:\d\d$`, d.next(t))
	assert.Regexp(t, `^  loops:  "reconcile" met; timeout 5s; [1-9]\d* beats, the last at \d\d:\d\d:\d\d; 0 timeouts$`, d.next(t))
	assert.Regexp(t, `^  conns:  \d+ held of \d+; \d+ accepted, \d+ evicted$`, d.next(t))
	assert.Regexp(t, `^  probes: 1 healthz ok, [1-9]\d* readyz ok, [1-9]\d* readyz not ready, 0 other$`, d.next(t))

	d.send(t, "mode degraded_polling")
	assert.Equal(t, `status: not ready: event delivery degraded: mode "degraded_polling"`, d.nextMatching(t, "status:"))
	status, body = d.probe(t, "/readyz")
	assert.Equal(t, 503, status)
	assert.Equal(t, "not ready: event delivery degraded\n", body)
	status, _ = d.probe(t, "/healthz")
	assert.Equal(t, 200, status)

	d.send(t, "mode pull_only")
	assert.Equal(t, "status: ready", d.nextMatching(t, "status:"))
	status, _ = d.probe(t, "/readyz")
	assert.Equal(t, 200, status)

	d.send(t, "bogus command")
	assert.Equal(t, `error: unknown command "bogus command"`, d.nextMatching(t, "error:"))
	assert.Equal(t, "commands:", d.next(t))

	d.send(t, strings.Repeat("x", 10*maxLine))
	assert.Equal(t, "error: line longer than 4096 bytes", d.nextMatching(t, "error:"))

	d.send(t, "subsystem-stopped route sync")
	assert.Equal(t, `status: not ready: subsystem stopped: "route sync"`, d.nextMatching(t, "status:"))
	status, body = d.probe(t, "/readyz")
	assert.Equal(t, 503, status)
	assert.Equal(t, "not ready: subsystem stopped\n", body)

	d.stop(t)
	assert.Equal(t, "healthdemo: stopped cleanly", d.nextMatching(t, "healthdemo: stopped"))
	assert.Contains(t, d.stderr.String(), `msg="health: readiness changed" ready=true`)
}

func TestDemoMissingInterface(t *testing.T) {
	d := startDemo(t, "-register-after", "0s", "-dataplane-after", "0s", "-iface", "wg-missing0")
	d.eventuallyAnswers(t, 503, "not ready: data plane lost\n")
	d.send(t, "status")
	assert.Equal(t, `status: not ready: data plane lost: interface "wg-missing0": route ip+net: no such network interface`, d.nextMatching(t, "status:"))
	d.stop(t)
}

// TestDemoCheckPending runs a check slower than the test: the node stays
// "data plane check pending" however long its latches have been set.
func TestDemoCheckPending(t *testing.T) {
	d := startDemo(t, "-register-after", "0s", "-dataplane-after", "0s", "-check-delay", "1h")
	d.eventuallyAnswers(t, 503, "not ready: data plane check pending\n")
	// Eventually: the loop's first Beat may still be on its way.
	require.Eventually(t, func() bool {
		status, body := d.probe(t, "/readyz?verbose")
		return status == 503 && body == "[+]registration ok\n[+]data-plane ok\n[-]data-plane-check failed: data plane check pending\n[+]event-delivery ok\n[+]subsystems ok\nreadyz check failed\n"
	}, 10*time.Second, 10*time.Millisecond, "every condition but the check met")
	d.send(t, "status")
	assert.Equal(t, "status: not ready: data plane check pending", d.nextMatching(t, "status:"))
	assert.Equal(t, "  unmet:  data plane check pending", d.next(t))
	assert.Equal(t, "  check:  set; 0 runs, 0 failed, 0 panicked, 0 stalled", d.next(t))
	assert.Regexp(t, `^  loops:  "reconcile" met; `, d.next(t))
	assert.NotContains(t, d.stderr.String(), "ready=true", "the check is set before the latch: never ready on the latch alone")
	d.stop(t)            // the slow check stops waiting with the demo's context
	goleak.VerifyNone(t) // waits for the poller to record that check and exit
	assert.NotContains(t, d.stderr.String(), "data-plane check failed", "stopping is not a failure")
}

// TestDemoHungLoop hangs the watched loop: /readyz says so once the
// loop's timeout has passed, the log names the loop, and it clears when
// the loop turns again. Liveness stays 200.
func TestDemoHungLoop(t *testing.T) {
	d := startDemo(t, "-register-after", "0s", "-dataplane-after", "0s", "-loop-timeout", "200ms")
	d.eventuallyAnswers(t, 200, "ok\n")

	d.send(t, "hang")
	assert.Equal(t, "loop: reconcile hangs at its next turn, on the routes lock", d.nextMatching(t, "loop:"))
	d.eventuallyAnswers(t, 503, "not ready: subsystem unresponsive\n")
	status, body := d.probe(t, "/healthz")
	assert.Equal(t, 200, status)
	assert.Equal(t, "ok\n", body)
	_, body = d.probe(t, "/readyz?verbose")
	assert.Contains(t, body, "[-]subsystems failed: subsystem unresponsive\n")
	assert.NotContains(t, body, "reconcile", "a name never reaches a body")
	// The stack is taken after the verdict, and reaches Status before
	// the ERROR line is written.
	d.eventuallyLogs(t, `level=ERROR msg="health: subsystem unresponsive" subsystem=reconcile timeout=200ms stack="goroutine `)
	d.send(t, "status")
	assert.Equal(t, `status: not ready: subsystem unresponsive: "reconcile" (no beat within 200ms)`, d.nextMatching(t, "status:"))
	assert.Regexp(t, `^  loops:  "reconcile" overdue; timeout 200ms; [1-9]\d* beats, the last at \S+; 1 timeouts$`, d.nextMatching(t, "  loops:"))
	// Where it is stuck: the loop's goroutine alone, waiting for the lock.
	header := d.next(t)
	assert.Regexp(t, `^          stack:  goroutine (\d+) \[sync\.Mutex\.Lock\]:$`, header)
	for line := d.next(t); !strings.Contains(line, ".(*agent).reconcile("); line = d.next(t) {
		assert.True(t, strings.HasPrefix(line, "                  "), "a line of the stack before the loop's frame: %q", line)
	}
	id := strings.TrimSuffix(strings.TrimPrefix(header, "          stack:  goroutine "), " [sync.Mutex.Lock]:")
	d.eventuallyLogs(t, `level=ERROR msg="health: subsystem unresponsive" subsystem=reconcile timeout=200ms stack="goroutine `+id+` [sync.Mutex.Lock]:\n`)
	assert.Regexp(t, `stack="goroutine `+id+` \[sync\.Mutex\.Lock\]:\\n[^"]*\\n[\w./]+healthdemo\.\(\*agent\)\.reconcile\(`, d.stderr.String())

	d.send(t, "resume")
	assert.Equal(t, "loop: reconcile turns again", d.nextMatching(t, "loop:"))
	d.eventuallyAnswers(t, 200, "ok\n")
	d.eventuallyLogs(t, `level=INFO msg="health: subsystem responsive again" subsystem=reconcile`)
	d.send(t, "status")
	d.nextMatching(t, "status: ready")
	assert.Regexp(t, `^  loops:  "reconcile" met; `, d.nextMatching(t, "  loops:"))
	assert.Regexp(t, `^  conns:  `, d.next(t), "no stack once met again")

	d.send(t, "hang") // and the demo stops while the loop hangs
	d.nextMatching(t, "loop:")
	d.stop(t)
}

// TestDemoLinkDown: the pretend netlink watch calls CheckNow, so readiness
// follows the link within the command's one-second wait, long before the
// check's next 5 s tick.
func TestDemoLinkDown(t *testing.T) {
	d := startDemo(t, "-register-after", "0s", "-dataplane-after", "0s")
	d.eventuallyAnswers(t, 200, "ok\n")
	d.send(t, "link-down")
	assert.Equal(t, `status: not ready: data plane lost: interface "lo" is down`, d.nextMatching(t, "status:"))
	status, body := d.probe(t, "/readyz")
	assert.Equal(t, 503, status)
	assert.Equal(t, "not ready: data plane lost\n", body)
	d.send(t, "link-up")
	assert.Equal(t, "status: ready", d.nextMatching(t, "status:"))
	d.stop(t)
}

func TestFormatStatus(t *testing.T) {
	returned := time.Date(2025, 3, 1, 12, 3, 4, 0, time.UTC)
	tests := []struct {
		name string
		st   health.Status
		want string
	}{
		{"fresh", health.Status{Unmet: []error{health.ErrRegistrationPending, health.ErrDataPlanePending}}, "" +
			"  unmet:  registration pending, data plane not configured\n" +
			"  check:  not set; 0 runs, 0 failed, 0 panicked, 0 stalled\n" +
			"  loops:  none\n" +
			"  conns:  0 held of 0; 0 accepted, 0 evicted\n" +
			"  probes: 0 healthz ok, 0 readyz ok, 0 readyz not ready, 0 other"},
		{"busy", health.Status{
			Unmet: []error{health.ErrDeliveryDegraded, health.ErrSubsystemStopped},
			Check: health.CheckStatus{Installed: true, Runs: 12, Failures: 3, Panics: 1, Stalls: 2, LastDuration: 1500*time.Microsecond + 42, LastReturned: returned},
			Watchdogs: []health.WatchdogStatus{
				{Name: "reconcile", Timeout: 5 * time.Second, Beats: 40, LastBeat: returned, Timeouts: 2},
				{Name: "watch \"pods\"", Timeout: time.Minute, Overdue: true, Timeouts: 1,
					Stack: "goroutine 9 [chan receive, 3 minutes]:\nmain.watch(...)\n\t/src/main.go:30 +0x19"},
			},
			Conns:  health.ConnStatus{Held: 3, Limit: 256, Accepted: 900, Evicted: 40, Pressure: true},
			Probes: health.ProbeCounts{Liveness: 10, ReadyOK: 7, ReadyNotReady: 3, Other: 2},
		}, "" +
			"  unmet:  event delivery degraded, subsystem stopped\n" +
			"  check:  set; 12 runs, 3 failed, 1 panicked, 2 stalled; the last took 1.5ms and returned at 12:03:04\n" +
			"  loops:  \"reconcile\" met; timeout 5s; 40 beats, the last at 12:03:04; 2 timeouts\n" +
			"          \"watch \\\"pods\\\"\" overdue; timeout 1m0s; 0 beats; 1 timeouts\n" +
			"          stack:  goroutine 9 [chan receive, 3 minutes]:\n" +
			"                  main.watch(...)\n" +
			"                  \t/src/main.go:30 +0x19\n" +
			"  conns:  3 held of 256; 900 accepted, 40 evicted; under pressure: it evicted in the last 10 s\n" +
			"  probes: 10 healthz ok, 7 readyz ok, 3 readyz not ready, 2 other"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, formatStatus(tc.st))
		})
	}
}

func TestDemoWithoutInput(t *testing.T) {
	d := startDemo(t, "-register-after", "0s", "-dataplane-after", "0s")
	require.NoError(t, d.stdin.Close()) // no terminal: it keeps serving
	d.eventuallyAnswers(t, 200, "ok\n")
	d.stop(t)
}

func TestDemoAddressInUse(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"-listen", taken.Addr().String()}, strings.NewReader(""), io.Discard, &stderr)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr.String(), "healthdemo: health: listen "+strconv.Quote(taken.Addr().String())+": address already in use")
}

func TestDemoBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-log-level", "loud"}, {"-listen", "nowhere"}, {"-register-after", "soon"}, {"-loop-timeout", "0s"}} {
		var stderr bytes.Buffer
		code := run(context.Background(), args, strings.NewReader(""), io.Discard, &stderr)
		assert.Equal(t, 2, code, "%v", args)
		assert.NotEmpty(t, stderr.String())
	}
}

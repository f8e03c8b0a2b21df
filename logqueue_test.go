package health

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// blockingSink is a log destination that stops taking lines while it is
// blocked, as stderr does when nobody reads the pipe: write(2) blocks.
type blockingSink struct {
	logs logBuffer // what it took

	mu    sync.Mutex
	open  chan struct{} // closed while writes go through
	stuck chan struct{} // closed once a write has waited
	once  sync.Once
}

func newBlockingSink() *blockingSink {
	open := make(chan struct{})
	close(open)
	return &blockingSink{open: open, stuck: make(chan struct{})}
}

func (b *blockingSink) block() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.open = make(chan struct{})
}

func (b *blockingSink) unblock() {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-b.open:
	default:
		close(b.open)
	}
}

func (b *blockingSink) Write(p []byte) (int, error) {
	b.mu.Lock()
	open := b.open
	b.mu.Unlock()
	select {
	case <-open:
	default:
		b.once.Do(func() { close(b.stuck) })
		<-open
	}
	return b.logs.Write(p)
}

// returnsPromptly runs f and fails the test if it has not returned within
// 5 s: far above any hold of the Server's lock, so only a call that waits
// for the blocked sink takes longer.
func returnsPromptly(t *testing.T, name string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Errorf("%s has not returned within 5 s", name)
	}
}

// healthLines returns the package's log lines from their level on.
func healthLines(logs *logBuffer) []string {
	var lines []string
	for _, line := range strings.Split(logs.String(), "\n") {
		if i := strings.Index(line, "level="); i >= 0 && strings.Contains(line, `msg="health: `) {
			lines = append(lines, afterValue.ReplaceAllString(line[i:], " after=…"))
		}
	}
	return lines
}

// afterValue is a recovery line's after attribute, which healthLines
// elides: it is the clock's, and TestRecoveryLinesSayHowLong checks it.
var afterValue = regexp.MustCompile(` after=\S+`)

// quotedStack is a text handler's stack attribute, the last of its line.
var quotedStack = regexp.MustCompile(` stack=("(?:[^"\\]|\\.)*"|\S+)$`)

// elideStacks replaces the value of each line's stack attribute with an
// ellipsis, for a test that checks the lines and not the stacks.
func elideStacks(lines []string) []string {
	var elided []string
	for _, line := range lines {
		elided = append(elided, quotedStack.ReplaceAllString(line, " stack=…"))
	}
	return elided
}

// TestBlockedLogSinkHoldsNothingBack: a log sink that stops taking lines
// (a full stderr pipe) holds back neither readiness nor any call. A hung
// loop's row 9 is published at its deadline, every method returns, a
// Beat recovers readiness before it returns, each deadline's timer
// returns rather than queue behind the sink, and once the sink takes
// lines again every line is there, in the order of the changes.
func TestBlockedLogSinkHoldsNothingBack(t *testing.T) {
	defer goleak.VerifyNone(t)
	const timeout = 50 * time.Millisecond
	sink := newBlockingSink()
	defer sink.unblock() // if the test ends early, before the leak check
	clk := newFakeClock()
	s := newServer(Config{Listen: "127.0.0.1:0"}, slog.New(slog.NewTextHandler(sink, nil)), clk)
	sink.logs.server = s
	setLatches(s)
	w := s.Watch("reconcile", timeout)
	w.Beat()
	require.NoError(t, s.Ready())

	ch := s.Changed()
	sink.block()
	w.Beat()
	returnsPromptly(t, "the deadline's timer", func() { clk.advance(timeout) })
	assert.True(t, isClosed(ch), "row 9 at the deadline while the log sink is blocked")
	assert.ErrorIs(t, s.Ready(), ErrSubsystemUnresponsive)
	assert.Equal(t, http.StatusServiceUnavailable, serve(s.Handler(), http.MethodGet, "/readyz").Code)
	select {
	case <-sink.stuck:
	case <-time.After(10 * time.Second):
		t.Fatal("the ERROR line never reached the sink")
	}

	returnsPromptly(t, "Status", func() { s.Status() })
	returnsPromptly(t, "CheckNow", s.CheckNow)
	returnsPromptly(t, "SetDeliveryMode", func() { s.SetDeliveryMode(DeliveryModeStreaming) })
	returnsPromptly(t, "Changed", func() { s.Changed() })
	returnsPromptly(t, "Beat on the overdue watchdog", w.Beat)
	assert.NoError(t, s.Ready(), "the Beat published its recovery before it returned")

	// Each deadline's timer finds the goroutine stuck writing and
	// returns, and so does each goroutine that takes its stack.
	goroutines := runtime.NumGoroutine()
	const rounds = 20
	for range rounds {
		returnsPromptly(t, "the deadline's timer", func() { clk.advance(timeout) })
		require.ErrorIs(t, s.Ready(), ErrSubsystemUnresponsive)
		returnsPromptly(t, "Beat", w.Beat)
	}
	returnsPromptly(t, "Stop", w.Stop)
	for end := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > goroutines && time.Now().Before(end); {
		time.Sleep(time.Millisecond) // the last stack's goroutine may still be returning
	}
	assert.LessOrEqual(t, runtime.NumGoroutine(), goroutines, "no goroutine waits behind the one stuck in the sink")

	sink.unblock()
	// The first deadline shows the test's goroutine, which made the
	// watchdog met; the others, the goroutines of returnsPromptly, which
	// have exited. stack_test.go checks the values.
	want := []string{
		`level=INFO msg="health: readiness changed" ready=false reason="data plane not configured"`,
		`level=INFO msg="health: readiness changed" ready=true after=…`,
		`level=WARN msg="health: readiness changed" ready=false reason="subsystem unresponsive"`,
		`level=INFO msg="health: readiness changed" ready=true after=…`,
	}
	for range rounds + 1 {
		want = append(want,
			`level=ERROR msg="health: subsystem unresponsive" subsystem=reconcile timeout=50ms stack=…`,
			`level=WARN msg="health: readiness changed" ready=false reason="subsystem unresponsive"`,
			`level=INFO msg="health: subsystem responsive again" subsystem=reconcile after=…`,
			`level=INFO msg="health: readiness changed" ready=true after=…`)
	}
	assert.Equal(t, want, elideStacks(healthLines(&sink.logs)))
}

// TestBlockedLogSinkHoldsNoCheckBack: the poller hands its lines to a
// goroutine of their own, so a blocked sink never keeps it from checking:
// readiness goes on following the check both ways.
func TestBlockedLogSinkHoldsNoCheckBack(t *testing.T) {
	defer goleak.VerifyNone(t)
	sink := newBlockingSink()
	defer sink.unblock()
	s := NewServer(Config{Listen: "127.0.0.1:0"}, slog.New(slog.NewTextHandler(sink, nil)))
	sink.logs.server = s
	setLatches(s)
	var failing atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.SetDataPlaneCheck(ctx, func() error {
		if failing.Load() {
			return errPlantedCheck
		}
		return nil
	})
	until := func(want error) {
		t.Helper()
		for end := time.Now().Add(10 * time.Second); ; {
			ch := s.Changed()
			if errors.Is(s.Ready(), want) || want == nil && s.Ready() == nil {
				return
			}
			select {
			case <-ch:
			case <-time.After(time.Until(end)):
				t.Fatalf("readiness is %v, not %v, 10 s on", s.Ready(), want)
			}
		}
	}
	until(nil)

	sink.block()
	for _, fail := range []bool{true, false, true} {
		failing.Store(fail)
		s.CheckNow()
		if fail {
			until(ErrDataPlaneLost)
		} else {
			until(nil)
		}
	}
	sink.unblock()
	cancel()
	lines := healthLines(&sink.logs)
	require.GreaterOrEqual(t, len(lines), 6)
	assert.Equal(t, []string{
		`level=ERROR msg="health: data-plane check failed" err="PLANTED-check-error-91bc wg0 10.0.0.1"`,
		`level=WARN msg="health: readiness changed" ready=false reason="data plane lost"`,
		`level=INFO msg="health: data-plane check recovered"`,
		`level=INFO msg="health: readiness changed" ready=true after=…`,
		`level=ERROR msg="health: data-plane check failed" err="PLANTED-check-error-91bc wg0 10.0.0.1"`,
		`level=WARN msg="health: readiness changed" ready=false reason="data plane lost"`,
	}, lines[len(lines)-6:])
}

// statusHandler is a log handler that reads the Server it logs for, as a
// handler that adds the node's state to every line would.
type statusHandler struct {
	slog.Handler
	s *Server
}

func (h statusHandler) Handle(ctx context.Context, r slog.Record) error {
	r.AddAttrs(slog.Int("unmet", len(h.s.Status().Unmet)), slog.Bool("ready_now", h.s.Ready() == nil))
	return h.Handler.Handle(ctx, r)
}

// TestLogHandlerMayCallTheServer: no lock is held while the handler runs,
// so a handler that reads the Server deadlocks nothing, whichever
// goroutine writes the line: a setter's, the timer's or the poller's.
func TestLogHandlerMayCallTheServer(t *testing.T) {
	defer goleak.VerifyNone(t)
	logs := &logBuffer{}
	h := &statusHandler{Handler: slog.NewTextHandler(logs, nil)}
	s := NewServer(Config{Listen: "127.0.0.1:0"}, slog.New(h))
	h.s, logs.server = s, s
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// until waits for cond, woken by each change, as Changed's doc shows.
	until := func(cond func() bool) {
		for {
			ch := s.Changed()
			if cond() {
				return
			}
			<-ch
		}
	}
	returnsPromptly(t, "the setters, a deadline and a check", func() {
		setLatches(s)
		w := s.Watch("loop", 20*time.Millisecond)
		defer w.Stop()
		w.Beat()
		until(func() bool { return errors.Is(s.Ready(), ErrSubsystemUnresponsive) }) // the timer
		w.Beat()
		w.Stop() // no second deadline while the check fails: it would add lines
		s.SetDataPlaneCheck(ctx, failingCheck(errPlantedCheck))
		until(func() bool { return errors.Is(s.Ready(), ErrDataPlaneLost) }) // the poller
		s.SetSubsystemStopped("route-sync")
	})
	cancel()
	for _, msg := range []string{"subsystem unresponsive", "subsystem responsive again", "data-plane check failed", "subsystem stopped"} {
		assert.Equal(t, 1, logs.count(`msg="health: `+msg+`"`), msg)
	}
	lines := healthLines(logs)
	assert.Len(t, lines, 12)
	for _, line := range lines {
		assert.Regexp(t, ` unmet=\d ready_now=(true|false)$`, line, "the handler read the Server")
	}
}

// gatedHandler records what it is given, once its gate is open.
type gatedHandler struct {
	gate    chan struct{}
	entered chan struct{} // receives once a Handle waits at the gate
	mu      sync.Mutex
	records []slog.Record
}

func (h *gatedHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *gatedHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *gatedHandler) WithGroup(string) slog.Handler            { return h }

func (h *gatedHandler) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.entered <- struct{}{}:
	default:
	}
	<-h.gate
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}

// text returns each record as "LEVEL msg key=value ...".
func (h *gatedHandler) text() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var lines []string
	for _, r := range h.records {
		line := r.Level.String() + " " + r.Message
		r.Attrs(func(a slog.Attr) bool {
			line += " " + a.String()
			return true
		})
		lines = append(lines, line)
	}
	return lines
}

// TestLogQueueBound: while the sink is blocked, the queue keeps the latest
// logQueueSize lines and drops the oldest; once it drains, the log says
// how many lines it lost, where they would have been, and every line
// carries the time it was decided, not the time it was written.
func TestLogQueueBound(t *testing.T) {
	h := &gatedHandler{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	s := NewServer(Config{Listen: "127.0.0.1:0"}, slog.New(h))
	logLine := func(n int) {
		changing(s, func() { s.log(slog.LevelInfo, "line", "n", n) })
	}
	writer := make(chan struct{})
	go func() {
		defer close(writer)
		logLine(0) // the log's goroutine takes it, and waits at the gate
	}()
	<-h.entered
	const queued = logQueueSize + 44
	for n := 1; n <= queued; n++ {
		returnsPromptly(t, "a line queued behind the stuck one", func() { logLine(n) })
	}
	held, _ := logBacklog(s)
	assert.Equal(t, logQueueSize, held, "the queue holds no more than its bound")
	opened := time.Now()
	close(h.gate)
	<-writer
	waitLogWritten(s) // the log's own goroutine writes them, after the calls returned

	want := []string{"INFO line n=0", "WARN health: log lines dropped count=44"}
	for n := queued - logQueueSize + 1; n <= queued; n++ {
		want = append(want, fmt.Sprintf("INFO line n=%d", n))
	}
	assert.Equal(t, want, h.text())
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.records {
		if r.Message == "line" {
			assert.True(t, r.Time.Before(opened), "a line carries the time it was queued")
		}
	}
	assert.True(t, logWritten(s))
}

// TestLogLinesKeepTheirSource: a line written later, by another goroutine
// perhaps, still names the code that decided it, as a direct call of the
// logger would with AddSource.
func TestLogLinesKeepTheirSource(t *testing.T) {
	h := &gatedHandler{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	close(h.gate)
	s := NewServer(Config{Listen: "127.0.0.1:0"}, slog.New(h))
	s.SetRegistered()
	s.SetSubsystemStopped("route-sync")
	setCheckVerdict(s, checkVerdict{err: errPlantedCheck})
	waitLogWritten(s)
	h.mu.Lock()
	defer h.mu.Unlock()
	var sources []string
	for _, r := range h.records {
		f := r.Source()
		require.NotNil(t, f, r.Message)
		sources = append(sources, r.Message+" "+f.Function[strings.LastIndex(f.Function, ".")+1:]+" "+f.File[strings.LastIndex(f.File, "/")+1:])
	}
	assert.Equal(t, []string{
		"health: readiness changed logReadinessChange readiness.go",
		"health: subsystem stopped SetSubsystemStopped readiness.go",
		"health: data-plane check failed recordCheck dataplane.go",
	}, sources)
}

// panickyHandler leaves its first Handle by exit, as a buggy handler
// might: a panic, or a runtime.Goexit, which no recover sees.
type panickyHandler struct {
	slog.Handler
	exit     func()
	panicked atomic.Bool
}

func (h *panickyHandler) Handle(ctx context.Context, r slog.Record) error {
	if !h.panicked.Swap(true) {
		h.exit()
	}
	return h.Handler.Handle(ctx, r)
}

// TestLogHandlerPanic: a handler's panic never reaches the caller, who no
// longer writes its lines; the log's goroutine recovers, drops that line
// and writes the next, and no lock is left held nor the writing stuck.
func TestLogHandlerPanic(t *testing.T) {
	for _, exit := range []struct {
		name string
		exit func()
	}{
		{"panic", func() { panic("handler bug") }},
		{"runtime.Goexit", runtime.Goexit},
	} {
		t.Run(exit.name, func(t *testing.T) { testLogHandlerExit(t, exit.exit) })
	}
}

func testLogHandlerExit(t *testing.T, exit func()) {
	logs := &logBuffer{}
	h := &panickyHandler{Handler: slog.NewTextHandler(logs, nil), exit: exit}
	s := NewServer(Config{Listen: "127.0.0.1:0"}, slog.New(h))
	logs.server = s
	assert.NotPanics(t, s.SetRegistered)
	waitLogWritten(s) // the panic, on the first line, has happened
	s.SetDataPlaneReady()
	assert.NoError(t, s.Ready())
	assert.Equal(t, []string{`level=INFO msg="health: readiness changed" ready=true after=…`}, readinessChanges(logs))

	// Two lines queued together: the handler exits on the first again,
	// and the second is still written, with no later line to start a
	// writer.
	h.panicked.Store(false)
	s.SetSubsystemStopped("route sync")
	assert.Equal(t, []string{
		`level=INFO msg="health: readiness changed" ready=true after=…`,
		`level=WARN msg="health: readiness changed" ready=false reason="subsystem stopped"`,
	}, readinessChanges(logs))
	assert.Zero(t, logs.count(`msg="health: subsystem stopped"`), "the line the handler exited on")
}

// stuckHandler is a log handler that never returns until it is released,
// as one writing to a remote sink that hangs.
type stuckHandler struct {
	slog.Handler
	release chan struct{}
	handled atomic.Int64 // records it has been handed
}

func (h *stuckHandler) Handle(ctx context.Context, r slog.Record) error {
	h.handled.Add(1)
	<-h.release
	return h.Handler.Handle(ctx, r)
}

// TestNoCallWaitsForTheSink: with a handler that blocks from the first
// line on, every method returns, each change is published before its
// call returns, and once the handler lets go every line is written, in
// the order of the changes. Were any caller to write its own lines, the
// first SetRegistered would never return.
func TestNoCallWaitsForTheSink(t *testing.T) {
	defer goleak.VerifyNone(t)
	logs := &logBuffer{}
	h := &stuckHandler{Handler: slog.NewTextHandler(logs, nil), release: make(chan struct{})}
	s := NewServer(Config{Listen: "127.0.0.1:0", Watchdogs: map[string]Duration{"gc": 0}}, slog.New(h))
	var once sync.Once
	release := func() { once.Do(func() { close(h.release) }) }
	defer release() // if the test ends early, before the leak check
	checking := make(chan struct{})
	defer close(checking) // the replaced check returns, and its poller ends
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var w *Watchdog
	for _, call := range []struct {
		name string
		f    func()
	}{
		{"SetRegistered", s.SetRegistered},
		{"SetDataPlaneReady", s.SetDataPlaneReady},
		{"SetDeliveryMode", func() { s.SetDeliveryMode(DeliveryModeDegradedPolling) }},
		{"SetDeliveryMode back", func() { s.SetDeliveryMode(DeliveryModeStreaming) }},
		{"Watch", func() { w = s.Watch("reconcile", time.Hour) }},
		{"Beat ending the first spell", func() { w.Beat() }},
		{"Beat", func() { w.Beat() }},
		{"Stop", func() { w.Stop() }},
		{"Watch overridden by the config", func() { s.Watch("gc", time.Hour).Stop() }},
		{"SetDataPlaneCheck", func() { s.SetDataPlaneCheck(ctx, func() error { <-checking; return nil }) }},
		{"CheckNow", s.CheckNow},
		{"SetDataPlaneCheck nil", func() { s.SetDataPlaneCheck(ctx, nil) }},
		{"SetSubsystemStopped", func() { s.SetSubsystemStopped("route-sync") }},
		{"SetDeliveryStopped", s.SetDeliveryStopped},
		{"Ready", func() { _ = s.Ready() }},
		{"Status", func() { s.Status() }},
		{"Changed", func() { s.Changed() }},
	} {
		returnsPromptly(t, call.name, call.f)
	}
	assert.ErrorIs(t, s.Ready(), ErrDeliveryStopped, "published before the calls returned")
	// The log's goroutine takes the first line, and holds it in the
	// handler: the rest wait in the queue.
	eventually(t, func() bool { return h.handled.Load() == 1 }, "the first line reaches the handler")

	release()
	waitLogWritten(s)
	assert.Equal(t, []string{
		`level=INFO msg="health: readiness changed" ready=false reason="data plane not configured"`,
		`level=INFO msg="health: readiness changed" ready=true after=…`,
		`level=WARN msg="health: watchdog override matches no watchdog" subsystem=gc`, // watched only later
		`level=WARN msg="health: readiness changed" ready=false reason="event delivery degraded"`,
		`level=INFO msg="health: readiness changed" ready=true after=…`,
		`level=WARN msg="health: readiness changed" ready=false reason="subsystem unresponsive"`,
		`level=INFO msg="health: readiness changed" ready=true after=…`,
		`level=INFO msg="health: watchdog timeout set by config" subsystem=gc timeout=0s`,
		`level=WARN msg="health: readiness changed" ready=false reason="data plane check pending"`,
		`level=INFO msg="health: readiness changed" ready=true after=…`,
		`level=ERROR msg="health: subsystem stopped" subsystem=route-sync`,
		`level=WARN msg="health: readiness changed" ready=false reason="subsystem stopped"`,
		`level=INFO msg="health: readiness changed" ready=false reason="event delivery stopped"`,
	}, healthLines(logs))
}

// TestBlockedLogSinkHoldsNoAcceptBack serves with the log sink blocked:
// Serve's start line, written by the goroutine that accepts, waits in the
// queue, and the kubelet's probes are answered all the same. Were the
// listener's lines written by that goroutine itself, it would stop at the
// first and every probe would time out.
func TestBlockedLogSinkHoldsNoAcceptBack(t *testing.T) {
	sink := newBlockingSink()
	s := NewServer(Config{Listen: "127.0.0.1:0"}, slog.New(slog.NewTextHandler(sink, nil)))
	sink.logs.server = s
	setLatches(s)
	sink.block() // from before Serve starts: its own start line waits too
	ln, err := s.Listen()
	require.NoError(t, err)
	addr, stop := startServingOn(t, s, ln)
	for range 5 {
		status, body, err := kubeletProbe(addr, "/healthz")
		require.NoError(t, err, "a liveness probe while the log sink is blocked")
		assert.Equal(t, http.StatusOK, status)
		assert.Equal(t, "ok\n", body)
	}
	sink.unblock()
	require.NoError(t, stop())
	logs := sink.logs.String()
	assert.Contains(t, logs, "health: serving probes")
}

// TestDetachedLogHandlerPanic: a handler that panics on a line Serve
// queues (here its start line) costs that line, not the process: the
// queue's own goroutine recovers, and the lines after it are written.
// Unrecovered there, the panic would end the agent, and the restart runs
// the drain path.
func TestDetachedLogHandlerPanic(t *testing.T) {
	logs := &logBuffer{}
	h := &panicOnce{Handler: slog.NewTextHandler(logs, nil), msg: "health: serving probes"}
	s := NewServer(Config{Listen: "127.0.0.1:0"}, slog.New(h))
	logs.server = s
	setLatches(s)
	_, stop := startServing(t, s)
	require.NoError(t, stop())
	assert.NotContains(t, logs.String(), "health: serving probes")
	assert.Contains(t, logs.String(), "health: stopped serving probes")
	assert.Equal(t, int32(1), h.panics.Load(), "the handler panicked, on the start line")
}

// panicOnce panics on the records whose message is msg, and counts its
// panics.
type panicOnce struct {
	slog.Handler
	msg    string
	panics atomic.Int32
}

func (h *panicOnce) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.panics.Add(1)
		panic("PLANTED handler bug")
	}
	return h.Handler.Handle(ctx, r)
}

package health

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadinessTable checks the /readyz answer and Ready's sentinel in
// every state of serverStates, and that those states reach every row of
// the README's readiness table.
func TestReadinessTable(t *testing.T) {
	var reached reasonSet
	for _, tc := range serverStates {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newTestServer(t)
			tc.set(s)
			rec := serve(s.Handler(), http.MethodGet, "/readyz")
			assert.Equal(t, tc.status, rec.Code)
			assert.Equal(t, tc.body, rec.Body.String())
			if len(tc.unmet) == 0 {
				assert.NoError(t, s.Ready())
				return
			}
			assert.ErrorIs(t, s.Ready(), tc.unmet[0], "Ready names the first unmet condition")
			for r, c := range conditions {
				reached = reached.add(reason(r), c.err == tc.unmet[0])
			}
		})
	}
	assert.Equal(t, reasonSet(1<<reasonReady-1), reached, "every row of the readiness table is the answer of some state")
}

// TestReadinessPrecedence sets every condition at once and lifts them one
// by one in table order: each answer must be the first condition still
// unmet, whatever else holds.
func TestReadinessPrecedence(t *testing.T) {
	s, _ := newTestServer(t)
	s.SetDeliveryStopped()
	s.SetDeliveryMode(DeliveryModeDegradedPolling)
	s.SetSubsystemStopped("wg")
	setCheckVerdict(s, checkVerdict{pending: true})

	steps := []struct {
		lift     func()
		body     string
		sentinel error
	}{
		{func() {}, "not ready: registration pending\n", ErrRegistrationPending},
		{s.SetRegistered, "not ready: data plane not configured\n", ErrDataPlanePending},
		{s.SetDataPlaneReady, "not ready: data plane check pending\n", ErrDataPlaneCheckPending},
		{func() { setCheckVerdict(s, checkVerdict{err: errPlantedCheck, stalled: true}) }, "not ready: data plane lost\n", ErrDataPlaneLost},
		{func() { setCheckVerdict(s, checkVerdict{stalled: true}) }, "not ready: data plane check stalled\n", ErrDataPlaneStalled},
		{func() { setCheckVerdict(s, checkVerdict{}) }, "not ready: event delivery stopped\n", ErrDeliveryStopped},
	}
	for _, step := range steps {
		step.lift()
		rec := serve(s.Handler(), http.MethodGet, "/readyz")
		assert.Equal(t, 503, rec.Code)
		assert.Equal(t, step.body, rec.Body.String())
		assert.ErrorIs(t, s.Ready(), step.sentinel)
	}

	// Delivery stopped is a latch; a fresh server shows the rest of the
	// order: degraded before subsystem stopped.
	s2, _ := newTestServer(t)
	s2.SetRegistered()
	s2.SetDataPlaneReady()
	s2.SetSubsystemStopped("wg")
	s2.SetDeliveryMode("")
	assert.Equal(t, "not ready: event delivery degraded\n", serve(s2.Handler(), "GET", "/readyz").Body.String())
	s2.Watch("hung", time.Hour)
	s2.SetDeliveryMode(DeliveryModeStreaming)
	assert.Equal(t, "not ready: subsystem stopped\n", serve(s2.Handler(), "GET", "/readyz").Body.String(), "stopped before unresponsive")
	assert.Equal(t, []error{ErrSubsystemStopped, ErrSubsystemUnresponsive}, s2.Status().Unmet)
}

func TestLatchesStaySet(t *testing.T) {
	s, _ := newTestServer(t)
	for i := 0; i < 3; i++ {
		s.SetRegistered()
		s.SetDataPlaneReady()
	}
	require.NoError(t, s.Ready())
	s.SetDeliveryStopped()
	s.SetDeliveryStopped()
	s.SetDeliveryMode(DeliveryModeStreaming)
	assert.ErrorIs(t, s.Ready(), ErrDeliveryStopped, "delivery stopped must not be cleared by a mode change")
}

func TestDeliveryModes(t *testing.T) {
	// agentMode stands for the agent's own delivery-mode type.
	type agentMode string
	tests := []struct {
		mode  DeliveryMode
		ready bool
	}{
		{DeliveryModeStreaming, true},
		{DeliveryModePullOnly, true},
		{DeliveryModeDegradedPolling, false},
		{"", false},
		{"Streaming", false},
		{"streaming ", false},
		{"reconnecting", false},
		{DeliveryMode(agentMode("pull_only")), true},
		{DeliveryMode(agentMode("degraded_polling")), false},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%q", tc.mode), func(t *testing.T) {
			s, _ := newTestServer(t)
			s.SetRegistered()
			s.SetDataPlaneReady()
			s.SetDeliveryMode(tc.mode)
			rec := serve(s.Handler(), http.MethodGet, "/readyz")
			if tc.ready {
				assert.Equal(t, 200, rec.Code)
				assert.NoError(t, s.Ready())
				return
			}
			assert.Equal(t, 503, rec.Code)
			assert.Equal(t, "not ready: event delivery degraded\n", rec.Body.String())
			assert.ErrorIs(t, s.Ready(), ErrDeliveryDegraded)
			assert.Contains(t, s.Ready().Error(), strconv.Quote(string(tc.mode)), "Ready names the mode")
		})
	}

	s, _ := newTestServer(t)
	s.SetRegistered()
	s.SetDataPlaneReady()
	s.SetDeliveryMode(DeliveryModeDegradedPolling)
	s.SetDeliveryMode(DeliveryModeStreaming)
	assert.NoError(t, s.Ready(), "the mode is the latest one, not a latch")
}

func TestReadyCarriesDetail(t *testing.T) {
	s, _ := newTestServer(t)
	s.SetRegistered()
	s.SetDataPlaneReady()
	s.SetSubsystemStopped("wg")
	s.SetSubsystemStopped("")
	s.SetSubsystemStopped("wg")
	s.SetSubsystemStopped("odd\nname\x00")
	err := s.Ready()
	assert.ErrorIs(t, err, ErrSubsystemStopped)
	assert.Equal(t, `subsystem stopped: "wg", "", "odd\nname\x00"`, err.Error())

	setCheckVerdict(s, checkVerdict{err: errPlantedCheck})
	assert.ErrorIs(t, s.Ready(), ErrDataPlaneLost)
	assert.ErrorIs(t, s.Ready(), errPlantedCheck, "the check's own error is reachable")
}

func TestReadinessChangesAreLoggedOnce(t *testing.T) {
	s, logs := newTestServer(t)
	s.SetRegistered()
	s.SetRegistered()
	s.SetDataPlaneReady()
	s.SetDataPlaneReady()
	s.SetDeliveryMode(DeliveryModePullOnly) // still ready: no change
	s.SetDeliveryMode(DeliveryModeDegradedPolling)
	s.SetDeliveryMode(DeliveryModeDegradedPolling)
	s.SetSubsystemStopped(`we"ird name`)

	for i := 0; i < 100; i++ {
		serve(s.Handler(), http.MethodGet, "/readyz")
		serve(s.Handler(), http.MethodGet, "/healthz")
	}
	want := []string{
		`level=INFO msg="health: readiness changed" ready=false reason="data plane not configured"`,
		`level=INFO msg="health: readiness changed" ready=true after=…`,
		`level=WARN msg="health: readiness changed" ready=false reason="event delivery degraded"`,
		`level=ERROR msg="health: subsystem stopped" subsystem="we\"ird name"`,
	}
	assert.Equal(t, want, healthLines(logs), "one line per change, none per probe")
}

// TestReadinessLogLevels walks bring-up, leaving ready, moving between
// unmet reasons and recovering: each change of the answer is one line, a
// warning only when it leaves ready.
func TestReadinessLogLevels(t *testing.T) {
	s, logs := newTestServer(t)
	steps := []struct {
		name   string
		change func()
		line   string // the readiness line the step logs; "" for none
	}{
		{"registered", s.SetRegistered, `level=INFO msg="health: readiness changed" ready=false reason="data plane not configured"`},
		{"check set", func() { setCheckVerdict(s, checkVerdict{pending: true}) }, ""},
		{"data plane ready", s.SetDataPlaneReady, `level=INFO msg="health: readiness changed" ready=false reason="data plane check pending"`},
		{"first check passed", func() { setCheckVerdict(s, checkVerdict{}) }, `level=INFO msg="health: readiness changed" ready=true after=…`},
		{"check failed", func() { setCheckVerdict(s, checkVerdict{err: errPlantedCheck}) }, `level=WARN msg="health: readiness changed" ready=false reason="data plane lost"`},
		{"check failed again", func() { setCheckVerdict(s, checkVerdict{err: errPlantedCheck}) }, ""},
		{"check passed, delivery degraded", func() {
			s.SetDeliveryMode(DeliveryModeDegradedPolling)
			setCheckVerdict(s, checkVerdict{})
		}, `level=INFO msg="health: readiness changed" ready=false reason="event delivery degraded"`},
		{"streaming again", func() { s.SetDeliveryMode(DeliveryModeStreaming) }, `level=INFO msg="health: readiness changed" ready=true after=…`},
		{"pull only: still ready", func() { s.SetDeliveryMode(DeliveryModePullOnly) }, ""},
		{"delivery stopped", s.SetDeliveryStopped, `level=WARN msg="health: readiness changed" ready=false reason="event delivery stopped"`},
	}
	for _, step := range steps {
		before := len(readinessChanges(logs))
		step.change()
		got := readinessChanges(logs)[before:]
		if step.line == "" {
			assert.Empty(t, got, step.name)
		} else {
			assert.Equal(t, []string{step.line}, got, step.name)
		}
	}
}

// afterOf returns the after attribute of the last line of logs that holds
// msg, parsed.
func afterOf(t *testing.T, logs *logBuffer, msg string) time.Duration {
	t.Helper()
	var after time.Duration
	for _, line := range strings.Split(logs.String(), "\n") {
		if !strings.Contains(line, msg) {
			continue
		}
		m := regexp.MustCompile(` after=(\S+)`).FindStringSubmatch(line)
		require.NotNil(t, m, "%s: no after", line)
		d, err := time.ParseDuration(m[1])
		require.NoError(t, err)
		after = d
	}
	return after
}

// TestRecoveryLinesSayHowLong checks after on both recovery lines: how
// long readiness was not ready (since NewServer the first time), and how
// long a watchdog's loop went without a Beat. Time passes by hand, so the
// figures are exact.
func TestRecoveryLinesSayHowLong(t *testing.T) {
	s, logs, clk := newFakeClockServer(t)
	clk.advance(90 * time.Second) // the outage starts at NewServer
	setLatches(s)
	assert.Equal(t, 90*time.Second, afterOf(t, logs, "ready=true"))

	s.SetDeliveryMode(DeliveryModeDegradedPolling)
	clk.advance(30 * time.Second)
	s.SetDeliveryMode(DeliveryModeStreaming)
	assert.Equal(t, 30*time.Second, afterOf(t, logs, "ready=true"))

	w := s.Watch("reconcile", time.Hour)
	defer w.Stop()
	w.Beat()
	clk.advance(2 * time.Hour) // late an hour ago
	require.ErrorIs(t, s.Ready(), ErrSubsystemUnresponsive)
	clk.advance(45 * time.Second)
	w.Beat()
	assert.Equal(t, 2*time.Hour+45*time.Second, afterOf(t, logs, "subsystem responsive again"), "since the last Beat")
	assert.Equal(t, time.Hour+45*time.Second, afterOf(t, logs, "ready=true"), "since the deadline")
}

// TestRecoveryAfterCountsFromTheLastBeat: a watchdog's recovery line
// says how long its loop went without a Beat, from its last Beat before
// the deadline, whatever retune came between, so that an operator reads
// the hang's length off the line; readiness's line still says how long
// readiness was lost.
func TestRecoveryAfterCountsFromTheLastBeat(t *testing.T) {
	for _, tc := range []struct {
		name       string
		hang       func(s *Server, clk *fakeClock) // from the last Beat, with a timeout of an hour, to the next
		responsive time.Duration                   // the loop's line's after
		ready      time.Duration                   // readiness's
	}{
		{"no retune", func(_ *Server, clk *fakeClock) { clk.advance(2*time.Hour + 45*time.Second) },
			2*time.Hour + 45*time.Second, time.Hour + 45*time.Second},
		{"shortened past the last Beat", func(s *Server, clk *fakeClock) {
			clk.advance(25 * time.Second)
			require.NoError(t, s.SetWatchdogs(map[string]Duration{"loop": Duration(3 * time.Second)}))
			clk.advance(2 * time.Second)
		}, 27 * time.Second, 2 * time.Second},
		{"lengthened while late, then shortened", func(s *Server, clk *fakeClock) {
			clk.advance(2 * time.Hour)
			require.NoError(t, s.SetWatchdogs(map[string]Duration{"loop": Duration(3 * time.Hour)}))
			clk.advance(time.Minute)
			require.NoError(t, s.SetWatchdogs(map[string]Duration{"loop": Duration(time.Second)}))
			clk.advance(5 * time.Second)
		}, 2*time.Hour + time.Minute + 5*time.Second, 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, logs, clk := newFakeClockReadyServer(t)
			w := s.Watch("loop", time.Hour)
			defer w.Stop()
			w.Beat()
			tc.hang(s, clk)
			require.ErrorIs(t, s.Ready(), ErrSubsystemUnresponsive)
			w.Beat()
			require.NoError(t, s.Ready())
			assert.Equal(t, tc.responsive, afterOf(t, logs, "subsystem responsive again"))
			assert.Equal(t, tc.ready, afterOf(t, logs, "ready=true"))
		})
	}
}

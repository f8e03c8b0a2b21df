package health

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests of this file pass a deadline with the fake clock's jump, so
// that an input arrives after the deadline and before its timer has run,
// as on a machine that has not yet scheduled the timer's goroutine: the
// verdict that input publishes must count the deadline all the same.

// readinessSince returns the readiness lines logged after the first skip.
func readinessSince(logs *logBuffer, skip int) []string { return readinessChanges(logs)[skip:] }

// deadlineLines are the lines of watchdog deadlines and recoveries, their
// stacks and afters elided.
func deadlineLines(logs *logBuffer) []string {
	var lines []string
	for _, line := range elideStacks(healthLines(logs)) {
		if strings.Contains(line, `msg="health: subsystem `) && !strings.Contains(line, "subsystem stopped") {
			lines = append(lines, line)
		}
	}
	return lines
}

// TestVerdictReenabledWatchdogPastItsDeadline: a watchdog switched back
// on whose last Beat, made while it was disabled, is older than its
// timeout is unmet in the publication of the SetWatchdogs call that
// switches it on, which logs the deadline as its timer would have.
func TestVerdictReenabledWatchdogPastItsDeadline(t *testing.T) {
	s, logs, clk := newFakeClockReadyServer(t)
	watchBeatenWhileDisabled(t, s, "reconcile", time.Minute)
	clk.advance(2 * time.Minute)
	require.NoError(t, s.Ready())
	seen := len(readinessChanges(logs))

	ch := s.Changed()
	require.NoError(t, s.SetWatchdogs(nil)) // the code's minute, from a Beat two minutes old
	require.ErrorIs(t, s.Ready(), ErrSubsystemUnresponsive, "unmet when SetWatchdogs returns")
	assert.EqualError(t, s.Ready(), `subsystem unresponsive: "reconcile" (no beat within 1m0s)`)
	assert.True(t, isClosed(ch), "Changed follows the same verdict")
	assert.Equal(t, WatchdogStatus{Name: "reconcile", Timeout: time.Minute, Beats: 1, LastBeat: fakeEpoch,
		Overdue: true, Timeouts: 1, Stack: stackBeatWhileDisabled}, s.Status().Watchdogs[0])

	clk.advance(0) // a timer late to run finds nothing more to report
	assert.Equal(t, uint64(1), s.Status().Watchdogs[0].Timeouts)
	assert.Equal(t, []string{
		`level=WARN msg="health: readiness changed" ready=false reason="subsystem unresponsive"`,
	}, readinessSince(logs, seen), "one move, to not ready")
	assert.Equal(t, []string{
		`level=ERROR msg="health: subsystem unresponsive" subsystem=reconcile timeout=1m0s stack=…`,
	}, deadlineLines(logs))
	assert.Equal(t, 1, logs.count(`stack="`+stackBeatWhileDisabled+`"`))
}

// TestVerdictTightenedPastTheLastBeat: SetWatchdogs shortens a running
// watchdog's timeout past the time since its last Beat. That call's
// publication makes it unmet, moving readiness once, and so does the
// next input's, whatever it is, before any timer runs.
func TestVerdictTightenedPastTheLastBeat(t *testing.T) {
	for _, tc := range []struct {
		name        string
		otherBeaten bool // before the retune: the node is ready
		input       func(s *Server, other *Watchdog)
	}{
		{"another loop's first Beat", false, func(_ *Server, other *Watchdog) { other.Beat() }},
		{"SetRegistered", true, func(s *Server, _ *Watchdog) { s.SetRegistered() }},
		{"a Stop", true, func(_ *Server, other *Watchdog) { other.Stop() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, logs, clk := newFakeClockReadyServer(t)
			w := s.Watch("reconcile", time.Hour)
			defer w.Stop()
			w.Beat()
			other := s.Watch("other", time.Hour)
			defer other.Stop()
			wantRetuned := `subsystem unresponsive: "reconcile" (no beat within 5m0s), "other" (no beat yet, timeout 1h0m0s)`
			wantLines := []string{}
			if tc.otherBeaten {
				other.Beat()
				wantRetuned = `subsystem unresponsive: "reconcile" (no beat within 5m0s)`
				wantLines = []string{`level=WARN msg="health: readiness changed" ready=false reason="subsystem unresponsive"`}
			}
			clk.advance(10 * time.Minute)
			seen := len(readinessChanges(logs))

			require.NoError(t, s.SetWatchdogs(map[string]Duration{"reconcile": Duration(5 * time.Minute)}))
			assert.EqualError(t, s.Ready(), wantRetuned, "when SetWatchdogs returns")
			tc.input(s, other)
			assert.EqualError(t, s.Ready(), `subsystem unresponsive: "reconcile" (no beat within 5m0s)`, "after the next input")
			clk.advance(0)
			assert.Equal(t, uint64(1), s.Status().Watchdogs[0].Timeouts)
			assert.Equal(t, wantLines, readinessSince(logs, seen), "one move at most, and never to ready")
			assert.Equal(t, []string{
				`level=ERROR msg="health: subsystem unresponsive" subsystem=reconcile timeout=5m0s stack=…`,
			}, deadlineLines(logs))
		})
	}
}

// TestVerdictDeadlinePassedBeforeItsTimer: a watchdog's deadline passes,
// and before its timer runs another loop's first Beat or the last latch
// arrives. The publication that input causes counts the deadline: the
// node never turns ready; the deadline is logged and counted once, with
// the loop's stack, and the loop's next Beat recovers it.
func TestVerdictDeadlinePassedBeforeItsTimer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before func(s *Server, other *Watchdog) // what is in place before the deadline
		input  func(s *Server, other *Watchdog) // what arrives after it
		line   string                           // the readiness line the input logs
	}{
		{"another loop's first Beat",
			func(s *Server, _ *Watchdog) { s.SetDataPlaneReady() },
			func(_ *Server, other *Watchdog) { other.Beat() },
			""},
		{"the last latch",
			func(_ *Server, other *Watchdog) { other.Beat() },
			func(s *Server, _ *Watchdog) { s.SetDataPlaneReady() },
			`level=INFO msg="health: readiness changed" ready=false reason="subsystem unresponsive"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, logs, clk := newFakeClockServer(t)
			s.SetRegistered()
			w := s.Watch("reconcile", time.Minute)
			defer w.Stop()
			w.Beat()
			other := s.Watch("other", time.Hour)
			defer other.Stop()
			tc.before(s, other)
			require.Error(t, s.Ready())
			seen := len(readinessChanges(logs))

			clk.jump(time.Minute) // the deadline; its timer has not run
			tc.input(s, other)
			require.ErrorIs(t, s.Ready(), ErrSubsystemUnresponsive)
			assert.EqualError(t, s.Ready(), `subsystem unresponsive: "reconcile" (no beat within 1m0s)`)
			assert.True(t, strings.HasPrefix(takenStack(t, s, 0), "goroutine "), "the stack of the goroutine that beat")
			clk.advance(0) // the timer, late
			assert.Equal(t, uint64(1), s.Status().Watchdogs[0].Timeouts)

			w.Beat()
			require.NoError(t, s.Ready())
			var want []string
			if tc.line != "" {
				want = append(want, tc.line)
			}
			want = append(want, `level=INFO msg="health: readiness changed" ready=true after=…`)
			assert.Equal(t, want, readinessSince(logs, seen), "never ready until the loop beat")
			assert.Equal(t, []string{
				`level=ERROR msg="health: subsystem unresponsive" subsystem=reconcile timeout=1m0s stack=…`,
				`level=INFO msg="health: subsystem responsive again" subsystem=reconcile after=…`,
			}, deadlineLines(logs))
		})
	}
}

// TestPublicationDoesNotWaitForTheStack: an input whose publication finds
// a deadline passed (its timer not yet run) returns while that deadline's
// stack is being taken: a dump stops the world, and neither a setter nor
// a Beat waits for one.
func TestPublicationDoesNotWaitForTheStack(t *testing.T) {
	s, logs, clk := newFakeClockReadyServer(t)
	inDump, release := holdDumps(s)
	w := s.Watch("reconcile", time.Minute)
	defer w.Stop()
	other := s.Watch("other", time.Hour)
	defer other.Stop()
	w.Beat()
	other.Beat()
	clk.jump(time.Minute)
	returnsPromptly(t, "SetRegistered", s.SetRegistered)
	<-inDump
	require.ErrorIs(t, s.Ready(), ErrSubsystemUnresponsive, "published before the stack is taken")
	returnsPromptly(t, "a Beat of another loop", other.Beat)
	returnsPromptly(t, "the loop's Beat", w.Beat)
	require.NoError(t, s.Ready())
	close(release)
	assert.Equal(t, 1, logs.count(`level=ERROR msg="health: subsystem unresponsive" subsystem=reconcile timeout=1m0s stack="goroutine `))
}

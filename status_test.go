package health

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/health/internal/listener"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestStatusProbeCounts(t *testing.T) {
	s, _ := newTestServer(t)
	requests := []struct{ method, target string }{
		{"GET", "/healthz"},
		{"HEAD", "/healthz?verbose"},
		{"GET", "/readyz"},          // not ready
		{"HEAD", "/readyz?verbose"}, // not ready
		{"POST", "/readyz"},         // 405
		{"GET", "/healthz/"},        // 404
		{"OPTIONS", "*"},            // 404
	}
	for _, r := range requests {
		serve(s.Handler(), r.method, r.target)
	}
	s.SetRegistered()
	s.SetDataPlaneReady()
	serve(s.Handler(), "GET", "/readyz")
	serve(s.Handler(), "GET", "/readyz?verbose=1")
	serve(s.Handler(), "GET", "/readyz?verbosex")
	serve(s.Handler(), "DELETE", "/healthz") // 405

	assert.Equal(t, ProbeCounts{Liveness: 2, ReadyOK: 3, ReadyNotReady: 2, Other: 4}, s.Status().Probes)
}

// TestStatusUnmet checks Status().Unmet in every state of serverStates:
// every unmet condition, in table order, where Ready names only the first.
func TestStatusUnmet(t *testing.T) {
	for _, tc := range serverStates {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newTestServer(t)
			tc.set(s)
			assert.Equal(t, tc.unmet, s.Status().Unmet, "the sentinels themselves, in table order")
		})
	}
}

// scriptedCheck returns a check that passes, fails, panics and passes;
// from its fifth call on, each call sends its number on started and blocks
// until release(n) is called for it (or for a later call). The poller
// records a result before it starts the next check, so when call n has
// started exactly n-1 results are in.
func scriptedCheck() (check func() error, started <-chan int, release func(n int)) {
	startedCh := make(chan int, 2)
	released := make(chan struct{}, 2) // one token per released call
	n := 0                             // the poller never runs two checks at once
	check = func() error {
		n++
		switch n {
		case 2:
			return errPlantedCheck
		case 3:
			panic("PLANTED-panic-value")
		case 5, 6:
			startedCh <- n
			<-released
		}
		return nil
	}
	var mu sync.Mutex
	done := 4
	release = func(upTo int) {
		mu.Lock()
		defer mu.Unlock()
		for ; done < upTo; done++ {
			released <- struct{}{}
		}
	}
	return check, startedCh, release
}

func TestStatusCheck(t *testing.T) {
	s, _, clk := newPolledServer(t)
	assert.Equal(t, CheckStatus{}, s.Status().Check, "no check set")

	begin := clk.now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	check, started, release := scriptedCheck()
	defer release(6)
	s.SetDataPlaneCheck(ctx, check)
	pollRuns(t, s, clk, 4)
	clk.advance(s.checkPeriod)
	require.Equal(t, 5, <-started)
	clk.advance(s.stallBound())
	st := s.Status().Check
	assert.Equal(t, uint64(1), st.Stalls, "the fifth check stalls")
	assert.True(t, st.Installed)
	assert.Equal(t, uint64(4), st.Runs, "the fifth has not returned")
	assert.Equal(t, uint64(2), st.Failures, "the error and the panic")
	assert.Equal(t, uint64(1), st.Panics)
	assert.Equal(t, []error{ErrDataPlaneStalled}, s.Status().Unmet)
	fourthReturned := st.LastReturned
	assert.False(t, fourthReturned.Before(begin))
	assert.LessOrEqual(t, st.LastDuration, fourthReturned.Sub(begin))

	release(5)
	require.Equal(t, 6, <-started)
	st = s.Status().Check
	assert.Equal(t, uint64(5), st.Runs)
	assert.GreaterOrEqual(t, st.LastDuration, s.stallBound(), "the fifth ran past the stall bound")
	assert.True(t, st.LastReturned.After(fourthReturned))

	s.SetDataPlaneCheck(ctx, nil)
	release(6)
	after := s.Status().Check
	assert.False(t, after.Installed)
	assert.Equal(t, uint64(5), after.Runs, "counters outlive the check; the sixth's result feeds nothing")
	assert.Equal(t, uint64(2), after.Failures)
	assert.Empty(t, s.Status().Unmet)
}

// steppedClock is a reading of the clock after the wall clock was stepped
// by step (by NTP, on a node that booted with a wrong clock): the wall
// time moved, the monotonic clock, which measures the age of what Status
// reports, did not. A time.Time cannot hold such a pair, which is why
// Status takes its reading apart.
func steppedClock(s *Server, step time.Duration) clockReading {
	now := s.readClock()
	now.wall = now.wall.Add(step)
	return now
}

// assertWallBetween checks that got's wall reading lies between those of
// from and to, moved by step, give or take a millisecond for the wall and
// the monotonic clock to disagree (slew): a step is hours, not that.
func assertWallBetween(t *testing.T, got, from, to time.Time, step time.Duration) {
	t.Helper()
	const slack = time.Millisecond
	lo, hi := from.Round(0).Add(step-slack), to.Round(0).Add(step+slack)
	got = got.Round(0)
	assert.False(t, got.Before(lo) || got.After(hi), "%v outside [%v, %v] after a step of %v", got, lo, hi, step)
}

// TestStatusCheckLastReturnedAfterClockStep: LastReturned is the check's
// return as the wall clock reads now, so that time() minus it, on a
// dashboard, is its age even after the wall clock was stepped.
func TestStatusCheckLastReturnedAfterClockStep(t *testing.T) {
	s, _ := newTestServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	before := time.Now()
	s.SetDataPlaneCheck(ctx, func() error { return nil })
	eventually(t, func() bool { return s.Status().Check.Runs == 1 }, "the check returns")
	after := time.Now()
	for _, step := range []time.Duration{0, time.Hour, -time.Hour} {
		assertWallBetween(t, s.status(steppedClock(s, step)).Check.LastReturned, before, after, step)
	}
	cancel()
}

func TestStatusCheckCountsOnlyResultsThatFeedReadiness(t *testing.T) {
	s, _ := newTestServer(t)
	s.checkPeriod = time.Hour
	releaseFirst := setBlockedCheck(t, s, errPlantedCheck)
	s.SetDataPlaneCheck(t.Context(), failingCheck(nil))
	eventually(t, func() bool { return s.Status().Check.Runs == 1 }, "the second check returns")
	releaseFirst()
	s.SetDataPlaneCheck(t.Context(), nil)
	goleak.VerifyNone(t) // waits for both pollers to exit: the first has recorded what it would
	assert.Equal(t, uint64(1), s.Status().Check.Runs)
	assert.Zero(t, s.Status().Check.Failures, "the replaced check's failure is not counted")
}

func TestStatusConns(t *testing.T) {
	s, _ := newTestServer(t)
	assert.Equal(t, ConnStatus{}, s.Status().Conns)
	s.conns.Held.Store(3)
	s.conns.Limit.Store(256)
	s.conns.Accepted.Store(40)
	s.conns.Evicted.Store(7)
	assert.Equal(t, ConnStatus{Held: 3, Limit: 256, Accepted: 40, Evicted: 7}, s.Status().Conns, "no eviction yet: no pressure")

	// LastEviction is on listener.MonotonicNow's clock (the listener
	// stamps it so: TestCountEviction); a time on any other clock, such as
	// a wall-clock UnixNano, would make these cases fail.
	now := listener.MonotonicNow()
	for _, tc := range []struct {
		name         string
		lastEviction int64
		pressure     bool
	}{
		{"an eviction now", now, true},
		{"an eviction a second inside the window", now - int64(pressureWindow-time.Second), true},
		{"an eviction a second past the window", now - int64(pressureWindow+time.Second), false},
		{"an eviction an hour ago", now - int64(time.Hour), false},
	} {
		s.conns.LastEviction.Store(tc.lastEviction)
		assert.Equal(t, tc.pressure, s.Status().Conns.Pressure, tc.name)
	}
}

// TestStatusIsASnapshot checks that Status hands out copies: a caller
// that changes any slice it got changes nothing that anyone else reads:
// the next Status, Ready, which reads the verdict Unmet is taken from,
// and the readiness table Unmet's sentinels come from, which Conditions
// hands out and every later verdict reads. (The handler's answers are
// built once, from the table's texts, so no Status can reach them.)
func TestStatusIsASnapshot(t *testing.T) {
	s, _ := newTestServer(t)
	st := s.Status()
	// The first rows of the table, where a slice of the table itself
	// would do for Unmet.
	require.Equal(t, []error{ErrRegistrationPending, ErrDataPlanePending}, st.Unmet)
	for i := range st.Unmet {
		st.Unmet[i] = errors.New("changed by a caller")
	}
	assert.Equal(t, []error{ErrRegistrationPending, ErrDataPlanePending}, s.Status().Unmet, "the next Status")
	assert.Equal(t, ErrRegistrationPending, s.Ready(), "Ready")
	assert.Equal(t, []error{ErrRegistrationPending, ErrDataPlanePending, ErrDataPlaneCheckPending, ErrDataPlaneLost,
		ErrDataPlaneStalled, ErrDeliveryStopped, ErrDeliveryDegraded, ErrSubsystemStopped, ErrSubsystemUnresponsive},
		Conditions(), "the readiness table")
	s.SetRegistered()
	assert.Equal(t, ErrDataPlanePending, s.Ready(), "a verdict made since")
	assert.Equal(t, []error{ErrDataPlanePending}, s.Status().Unmet, "a verdict made since")

	w := s.Watch("loop", time.Hour)
	defer w.Stop()
	s.SetSubsystemStopped("route-sync")
	// What each slice holds, written out: a Status taken to compare
	// with would share whatever this one shares.
	unmet := []error{ErrDataPlanePending, ErrSubsystemStopped, ErrSubsystemUnresponsive}
	watchdogs := []WatchdogStatus{{Name: "loop", Timeout: time.Hour, Overdue: true}}
	totals := []WatchdogTotals{{Name: "loop"}}
	stopped := []string{"route-sync"}
	st = s.Status()
	require.Equal(t, unmet, st.Unmet)
	require.Equal(t, watchdogs, st.Watchdogs)
	require.Equal(t, totals, st.WatchdogTotals)
	require.Equal(t, stopped, st.Stopped)
	st.Unmet[0] = errors.New("changed by a caller")
	st.Watchdogs[0].Name = "changed by a caller"
	st.WatchdogTotals[0].Name, st.WatchdogTotals[0].Beats = "changed by a caller", 99
	st.Stopped[0] = "changed by a caller"
	next := s.Status()
	assert.Equal(t, unmet, next.Unmet)
	assert.Equal(t, watchdogs, next.Watchdogs)
	assert.Equal(t, totals, next.WatchdogTotals)
	assert.Equal(t, stopped, next.Stopped)
	w.Beat()
	assert.Equal(t, []WatchdogTotals{{Name: "loop", Beats: 1}}, s.Status().WatchdogTotals, "the totals count on from the Server's own")
}

// TestStatusCheckLastError steps a check through a failure, a pass, a
// panic and a failure, then removes it. Each call announces itself and
// waits for its result; the poller records a result before it starts the
// next check, so once call n+1 has started, result n is in and nothing
// later is.
func TestStatusCheckLastError(t *testing.T) {
	s, _, clk := newPolledServer(t)
	assert.Nil(t, s.Status().Check.LastError, "no check set")

	started := make(chan struct{})
	results := make(chan func() error)
	check := func() error {
		started <- struct{}{}
		return (<-results)()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.SetDataPlaneCheck(ctx, check)
	<-started
	assert.Nil(t, s.Status().Check.LastError, "none returned yet")
	next := func(result func() error) CheckStatus {
		results <- result
		clk.advance(s.checkPeriod)
		<-started
		return s.Status().Check
	}

	st := next(failingCheck(errPlantedCheck))
	assert.Same(t, errPlantedCheck, st.LastError, "the check's own error, unwrapped")

	st = next(failingCheck(nil))
	assert.Nil(t, st.LastError, "the check passed")

	st = next(func() error { panic("PLANTED-panic-value") })
	require.Error(t, st.LastError, "a panic is a failure")
	assert.Equal(t, "data-plane check panicked: PLANTED-panic-value", st.LastError.Error())
	assert.Equal(t, uint64(1), st.Panics)

	next(failingCheck(errPlantedCheck))
	s.SetDataPlaneCheck(ctx, nil)
	results <- failingCheck(nil) // the fifth check's result feeds nothing
	st = s.Status().Check
	assert.False(t, st.Installed)
	assert.Equal(t, uint64(4), st.Runs)
	assert.Same(t, errPlantedCheck, st.LastError, "like the counters, it outlives the check")
	assert.Empty(t, s.Status().Unmet, "while readiness no longer rests on it")
}

func TestStatusStopped(t *testing.T) {
	s, _ := newTestServer(t)
	assert.Empty(t, s.Status().Stopped)
	for _, name := range []string{"route-sync", plantedSubsystem, "route-sync", "", "\x00odd\n"} {
		s.SetSubsystemStopped(name)
	}
	st := s.Status()
	assert.Equal(t, []string{"route-sync", plantedSubsystem, "", "\x00odd\n"}, st.Stopped, "each name once, in order")
	assert.Contains(t, st.Unmet, ErrSubsystemStopped)

	st.Stopped[0] = "changed by a caller"
	assert.Equal(t, "route-sync", s.Status().Stopped[0], "a snapshot")
	assert.Equal(t, "not ready: registration pending\n", serve(s.Handler(), "GET", "/readyz").Body.String(),
		"the names reach no body")
}

// TestConditions checks that Conditions is the readiness table itself, in
// its order, and that a caller cannot change the table through it.
func TestConditions(t *testing.T) {
	conds := Conditions()
	require.Len(t, conds, int(reasonReady), "one per row of the readiness table")
	for r, err := range conds {
		assert.Same(t, conditions[r].err, err, "row %d", r+1)
		// Collectors use the text as a label value: keep it words of
		// lower-case letters, so that it stays one without escaping.
		assert.Regexp(t, `^[a-z]+( [a-z]+)*$`, err.Error())
	}
	conds[0] = errors.New("changed by a caller")
	assert.Same(t, ErrRegistrationPending, Conditions()[0])

	s, _ := newTestServer(t)
	s.SetSubsystemStopped(plantedSubsystem)
	s.SetDeliveryMode("")
	s.SetDeliveryStopped()
	setCheckVerdict(s, checkVerdict{err: errPlantedCheck, stalled: true})
	unmet := s.Status().Unmet
	assert.Equal(t, unmet, slices.DeleteFunc(Conditions(), func(err error) bool { return !slices.Contains(unmet, err) }),
		"Status.Unmet lists them in the same order")
}

// TestStatusSince: Since is NewServer's time until the set of unmet
// conditions first changes, and moves exactly when that set changes: not
// for a setter that changes nothing, nor for a change of Ready's detail
// alone. It reads the wall clock as it is now, so a step of the wall
// clock since does not move it.
func TestStatusSince(t *testing.T) {
	before := time.Now()
	s, _ := newTestServer(t)
	after := time.Now()
	assertWallBetween(t, s.Status().Since, before, after, 0)

	for _, step := range []struct {
		name  string
		set   func()
		moves bool
	}{
		{"SetRegistered", s.SetRegistered, true},
		{"SetRegistered again", s.SetRegistered, false},
		{"SetDeliveryMode streaming, as it was", func() { s.SetDeliveryMode(DeliveryModeStreaming) }, false},
		{"SetDataPlaneReady: ready", s.SetDataPlaneReady, true},
		{"SetSubsystemStopped", func() { s.SetSubsystemStopped("route-sync") }, true},
		{"another subsystem: only the detail changes", func() { s.SetSubsystemStopped("peer-gc") }, false},
		{"SetDeliveryMode degraded", func() { s.SetDeliveryMode(DeliveryModeDegradedPolling) }, true},
		{"another degraded mode: only the detail changes", func() { s.SetDeliveryMode("polling") }, false},
	} {
		prev := s.Status().Since
		before := time.Now()
		step.set()
		after := time.Now()
		got := s.Status().Since
		if step.moves {
			assert.True(t, got.After(prev), "%s: Since stayed at %v", step.name, prev)
			assertWallBetween(t, got, before, after, 0)
		} else {
			assert.True(t, got.Equal(prev), "%s: Since moved from %v to %v", step.name, prev, got)
		}
	}

	before = time.Now()
	s.SetDeliveryMode(DeliveryModePullOnly)
	after = time.Now()
	for _, step := range []time.Duration{0, time.Hour, -time.Hour} {
		assertWallBetween(t, s.status(steppedClock(s, step)).Since, before, after, step)
	}
}

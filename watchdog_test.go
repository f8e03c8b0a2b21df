package health

import (
	"errors"
	"math"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// newReadyServer is a server with every latch set: ready until a watchdog
// says otherwise.
func newReadyServer(t *testing.T) (*Server, *logBuffer) {
	t.Helper()
	s, logs := newTestServer(t)
	s.SetRegistered()
	s.SetDataPlaneReady()
	require.NoError(t, s.Ready())
	return s, logs
}

// waitUnresponsive waits until s reports a subsystem unresponsive, woken
// by each change as Changed's doc shows, so that a deadline that passed
// before the wait began is not waited for in vain.
func waitUnresponsive(t *testing.T, s *Server, what string) {
	t.Helper()
	for {
		ch := s.Changed()
		if errors.Is(s.Ready(), ErrSubsystemUnresponsive) {
			return
		}
		waitClosed(t, ch, 10*time.Second, what)
	}
}

// waitClosed waits for ch, Changed's channel, and returns when it saw it
// closed.
func waitClosed(t *testing.T, ch <-chan struct{}, within time.Duration, what string) time.Time {
	t.Helper()
	select {
	case <-ch:
		return time.Now()
	case <-time.After(within):
		t.Fatalf("no change within %v: %s", within, what)
		return time.Time{}
	}
}

func TestWatchPanicsOnNonPositiveTimeout(t *testing.T) {
	for _, tc := range []struct {
		timeout time.Duration
		panic   string
	}{
		{0, `health: Watch "route \"sync\"": timeout 0s is not positive`},
		{-time.Second, `health: Watch "route \"sync\"": timeout -1s is not positive`},
	} {
		s, _ := newReadyServer(t)
		assert.PanicsWithValue(t, tc.panic, func() { s.Watch(`route "sync"`, tc.timeout) })
		assert.NoError(t, s.Ready(), "nothing is watched")
		assert.Empty(t, s.Status().Watchdogs)
		assert.False(t, internals(s).timerArmed)
	}
}

// TestWatchdogFirstBeat is the first-beat rule: a loop that has not turned
// has shown nothing, so the node is not ready until it does.
func TestWatchdogFirstBeat(t *testing.T) {
	s, logs := newReadyServer(t)
	w := s.Watch("netlink "+plantedSubsystem, time.Hour)
	defer w.Stop()

	assert.ErrorIs(t, s.Ready(), ErrSubsystemUnresponsive)
	assert.Equal(t, `subsystem unresponsive: "netlink PLANTED-subsystem-7f3a node-a" (no beat yet, timeout 1h0m0s)`, s.Ready().Error())
	rec := serve(s.Handler(), http.MethodGet, "/readyz")
	assert.Equal(t, 503, rec.Code)
	assert.Equal(t, "not ready: subsystem unresponsive\n", rec.Body.String())
	assert.Equal(t, "[+]registration ok\n[+]data-plane ok\n[+]event-delivery ok\n[-]subsystems failed: subsystem unresponsive\nreadyz check failed\n",
		serve(s.Handler(), http.MethodGet, "/readyz?verbose").Body.String())
	assert.Equal(t, "ok\n", serve(s.Handler(), http.MethodGet, "/healthz").Body.String(), "liveness stays 200")

	w.Beat()
	assert.NoError(t, s.Ready(), "ready when the first Beat returns")
	assert.Equal(t, "ok\n", serve(s.Handler(), http.MethodGet, "/readyz").Body.String())
	assert.Equal(t, []string{
		`level=INFO msg="health: readiness changed" ready=false reason="data plane not configured"`,
		`level=INFO msg="health: readiness changed" ready=true after=…`,
		`level=WARN msg="health: readiness changed" ready=false reason="subsystem unresponsive"`,
		`level=INFO msg="health: readiness changed" ready=true after=…`,
	}, readinessChanges(logs))
	assert.Zero(t, logs.count(`msg="health: subsystem unresponsive"`), "no deadline has passed")
	assert.Zero(t, logs.count("responsive again"), "a first Beat is not a recovery")
}

// TestWatchdogDeadline is the time bound on both sides: row 9 never before
// the last Beat plus the timeout, and at most 1 s after it.
func TestWatchdogDeadline(t *testing.T) {
	const timeout = 250 * time.Millisecond
	s, logs := newReadyServer(t)
	w := s.Watch("reconcile", timeout)
	defer w.Stop()

	before := time.Now()
	w.Beat()
	after := time.Now()
	ch := s.Changed()
	require.NoError(t, s.Ready())
	// The Beat read the clock after before: its deadline is no earlier
	// than before+timeout, so every answer read before that is ready.
	samples := 0
	for {
		err := s.Ready()
		read := time.Now()
		if read.Sub(before) >= timeout {
			break
		}
		require.NoError(t, err, "unmet %v after the Beat, before its deadline", read.Sub(before))
		samples++
		time.Sleep(time.Millisecond) // the sampling rate, not a wait for anything
	}
	assert.Greater(t, samples, 10)
	detected := waitClosed(t, ch, timeout+5*time.Second, "the deadline")
	assert.LessOrEqual(t, detected.Sub(after), timeout+time.Second, "at most 1 s after the deadline")
	assert.ErrorIs(t, s.Ready(), ErrSubsystemUnresponsive)
	assert.Equal(t, `subsystem unresponsive: "reconcile" (no beat within 250ms)`, s.Ready().Error())
	assert.Equal(t, "not ready: subsystem unresponsive\n", serve(s.Handler(), http.MethodGet, "/readyz").Body.String())
	assert.Equal(t, 1, logs.count(`level=ERROR msg="health: subsystem unresponsive" subsystem=reconcile timeout=250ms`))
	assert.False(t, internals(s).timerArmed, "a late watchdog needs no timer: a Beat brings it back")
}

// TestWatchdogFirstDeadline: the first deadline counts from Watch, and
// passing it is logged and counted like any other, though the watchdog
// was unmet from the start.
func TestWatchdogFirstDeadline(t *testing.T) {
	const timeout = 250 * time.Millisecond
	s, logs := newReadyServer(t)
	before := time.Now()
	w := s.Watch("watch", timeout)
	after := time.Now()
	defer w.Stop()

	var passed time.Time
	for passed.IsZero() {
		// Counted before Status is read: a line logged after it would
		// otherwise be charged to a read before the deadline.
		logged := logs.count("health: subsystem unresponsive")
		st := s.Status().Watchdogs[0]
		read := time.Now()
		require.True(t, st.Overdue)
		switch {
		case st.Timeouts == 1:
			passed = read
		case read.Sub(before) < timeout:
			require.Zero(t, logged, "logged before the first deadline")
		case read.Sub(after) > timeout+5*time.Second:
			t.Fatal("the first deadline never passed")
		}
		time.Sleep(time.Millisecond) // the sampling rate
	}
	assert.LessOrEqual(t, passed.Sub(after), timeout+time.Second)
	assert.Equal(t, 1, logs.count(`level=ERROR msg="health: subsystem unresponsive" subsystem=watch timeout=250ms`))
	assert.Equal(t, `subsystem unresponsive: "watch" (no beat yet, timeout 250ms)`, s.Ready().Error())

	w.Beat()
	assert.NoError(t, s.Ready())
	assert.Equal(t, 1, logs.count(`level=INFO msg="health: subsystem responsive again" subsystem=watch`))
}

// TestWatchdogBeatsMoveTheDeadline: a loop that beats well within its
// timeout stays met, and the timer wakes about once per timeout, not per
// Beat nor every few milliseconds.
func TestWatchdogBeatsMoveTheDeadline(t *testing.T) {
	const timeout = 150 * time.Millisecond
	s, logs, clk := newFakeClockReadyServer(t)
	w := s.Watch("reconcile", timeout)
	defer w.Stop()
	w.Beat()
	gen := internals(s).watchGen
	const turns = 50 // a tenth of the timeout each: five timeouts
	for range turns {
		clk.advance(timeout / 10) // the loop's turn
		w.Beat()
		require.NoError(t, s.Ready(), "a beating loop is met")
	}
	arms := internals(s).watchGen - gen
	assert.LessOrEqual(t, arms, uint64(turns/10+1), "the timer rearms about once per timeout")
	assert.Zero(t, logs.count("health: subsystem"))
}

// TestWatchdogRecovers: a Beat on an overdue watchdog restores readiness
// before it returns; each deadline passed is logged once, each recovery
// once, and nothing is logged per Beat.
func TestWatchdogRecovers(t *testing.T) {
	const timeout = 250 * time.Millisecond
	s, logs, clk := newFakeClockReadyServer(t)
	w := s.Watch("reconcile", timeout)
	defer w.Stop()

	for round := 1; round <= 2; round++ {
		w.Beat()
		clk.advance(timeout)
		require.ErrorIs(t, s.Ready(), ErrSubsystemUnresponsive, "the deadline")
		assert.False(t, internals(s).timerArmed, "nothing left to fire: the line cannot repeat")

		w.Beat()
		assert.NoError(t, s.Ready(), "recovered when Beat returns")
		for i := 0; i < 100; i++ {
			w.Beat()
		}
		assert.Equal(t, round, logs.count(`level=ERROR msg="health: subsystem unresponsive" subsystem=reconcile timeout=250ms`))
		assert.Equal(t, round, logs.count(`level=INFO msg="health: subsystem responsive again" subsystem=reconcile`))
		assert.Equal(t, uint64(round), s.Status().Watchdogs[0].Timeouts)
	}
}

func TestWatchdogStop(t *testing.T) {
	s, logs := newReadyServer(t)
	a := s.Watch("a", time.Hour)
	b := s.Watch("b", time.Hour)
	require.True(t, internals(s).timerArmed)
	b.Beat()
	require.ErrorIs(t, s.Ready(), ErrSubsystemUnresponsive, "a has not beaten")

	ch := s.Changed()
	a.Stop()
	waitClosed(t, ch, time.Second, "stopping the overdue one")
	assert.NoError(t, s.Ready(), "a stopped watchdog no longer counts")
	assert.True(t, internals(s).timerArmed, "b is still watched")
	require.Len(t, s.Status().Watchdogs, 1)
	assert.Equal(t, "b", s.Status().Watchdogs[0].Name)

	b.Stop()
	b.Stop()
	a.Stop()
	assert.False(t, internals(s).timerArmed, "the last Stop stops the timer")
	assert.Empty(t, s.Status().Watchdogs)
	assert.Empty(t, internals(s).watched)

	logged := logs.String()
	s.mu.Lock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.Beat() // stopped before its first Beat
		b.Beat()
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Error("a Beat after Stop waited for the lock")
	}
	s.mu.Unlock()
	<-done
	assert.NoError(t, s.Ready(), "a Beat after Stop does nothing")
	assert.Empty(t, s.Status().Watchdogs)
	assert.False(t, internals(s).timerArmed)
	assert.Equal(t, logged, logs.String())
	goleak.VerifyNone(t)

	c := s.Watch("c", time.Hour)
	assert.True(t, internals(s).timerArmed, "a new watchdog arms the timer again")
	c.Stop()
	assert.False(t, internals(s).timerArmed)
}

// TestWatchdogStopRacesTheTimer stops watchdogs whose deadlines are
// passing: whatever the order, nothing is left armed and nothing runs.
func TestWatchdogStopRacesTheTimer(t *testing.T) {
	defer goleak.VerifyNone(t)
	s, _ := newReadyServer(t)
	for i := 0; i < 200; i++ {
		w := s.Watch("short", time.Duration(rand.IntN(100))*time.Microsecond+time.Nanosecond)
		w.Beat()
		if i%2 == 0 {
			time.Sleep(time.Duration(rand.IntN(100)) * time.Microsecond) // let some deadlines pass
		}
		w.Stop()
		require.False(t, internals(s).timerArmed)
	}
	assert.NoError(t, s.Ready())
}

// TestWatchdogLongTimeout: a timeout too long to add to the clock ("never")
// is no deadline in the past.
func TestWatchdogLongTimeout(t *testing.T) {
	s, logs := newReadyServer(t)
	w := s.Watch("patient", math.MaxInt64)
	defer w.Stop()
	w.Beat()
	ch := s.Changed()
	require.NoError(t, s.Ready())
	st := internals(s)
	assert.Equal(t, time.Duration(math.MaxInt64), st.timerAt)
	s.deadlinesPassed(st.watchGen) // as if the timer fired now
	assert.NoError(t, s.Ready())
	assert.False(t, isClosed(ch))
	assert.Zero(t, logs.count(`msg="health: subsystem unresponsive"`))
}

func TestWatchdogStatus(t *testing.T) {
	// The second's deadline is passed by hand, once every Beat is in: a
	// real one could pass from Watch on a slow machine, and count a
	// timeout more.
	const timeout = time.Hour
	s, _, clk := newFakeClockReadyServer(t)
	first := s.Watch("loop", 24*time.Hour)
	second := s.Watch("loop", timeout) // names may repeat
	third := s.Watch("netlink", 12*time.Hour)
	defer first.Stop()
	defer second.Stop()
	defer third.Stop()

	assert.Equal(t, []WatchdogStatus{
		{Name: "loop", Timeout: 24 * time.Hour, Overdue: true},
		{Name: "loop", Timeout: timeout, Overdue: true},
		{Name: "netlink", Timeout: 12 * time.Hour, Overdue: true},
	}, s.Status().Watchdogs, "in Watch order, unmet before the first Beat")
	assert.Equal(t, `subsystem unresponsive: "loop" (no beat yet, timeout 24h0m0s), "loop" (no beat yet, timeout 1h0m0s), "netlink" (no beat yet, timeout 12h0m0s)`, s.Ready().Error())

	clk.advance(time.Second)
	first.Beat()
	first.Beat()
	third.Beat()
	clk.advance(time.Second)
	second.Beat()
	clk.advance(2 * time.Hour)
	waitUnresponsive(t, s, "the second's deadline")
	st := s.Status().Watchdogs
	require.Len(t, st, 3)
	for i, want := range []struct {
		beats    uint64
		overdue  bool
		timeouts uint64
		lastBeat time.Duration // since the clock's start
	}{{2, false, 0, time.Second}, {1, true, 1, 2 * time.Second}, {1, false, 0, time.Second}} {
		assert.Equal(t, want.beats, st[i].Beats, i)
		assert.Equal(t, want.overdue, st[i].Overdue, i)
		assert.Equal(t, want.timeouts, st[i].Timeouts, i)
		assert.Equal(t, fakeEpoch.Add(want.lastBeat), st[i].LastBeat, i)
	}
	assert.Equal(t, []error{ErrSubsystemUnresponsive}, s.Status().Unmet)
	assert.Equal(t, `subsystem unresponsive: "loop" (no beat within 1h0m0s)`, s.Ready().Error())

	assert.Equal(t, []WatchdogTotals{{Name: "loop", Beats: 3, Timeouts: 1}, {Name: "netlink", Beats: 1}},
		s.Status().WatchdogTotals, "by name, in the order of each name's first Watch")

	second.Stop()
	assert.Equal(t, []string{"loop", "netlink"}, []string{s.Status().Watchdogs[0].Name, s.Status().Watchdogs[1].Name})
	assert.Empty(t, s.Status().Unmet)
	assert.Equal(t, []WatchdogTotals{{Name: "loop", Beats: 3, Timeouts: 1}, {Name: "netlink", Beats: 1}},
		s.Status().WatchdogTotals, "a stopped watchdog's counts stay in its name's totals")
}

// TestWatchdogTotalsNeverFall: a name's totals count every watchdog
// watched under it, so they never fall, whichever watchdogs stop (a worker
// pool that shrinks) or start, and a name stays once all of its watchdogs
// stopped. Summed over Status.Watchdogs, the same counts fall.
func TestWatchdogTotalsNeverFall(t *testing.T) {
	s, _, clk := newFakeClockReadyServer(t)
	// flaky's deadline is passed by hand, once, after both of its beats:
	// a real one could pass again during the checks below on a slow
	// machine.
	steady := s.Watch("worker", 24*time.Hour)
	flaky := s.Watch("worker", time.Hour)
	for range 10 {
		steady.Beat()
	}
	flaky.Beat()
	flaky.Beat()
	clk.advance(2 * time.Hour)
	waitUnresponsive(t, s, "the flaky worker's deadline")

	var last WatchdogTotals
	check := func(what string) {
		t.Helper()
		totals := s.Status().WatchdogTotals
		require.Len(t, totals, 1)
		assert.Equal(t, "worker", totals[0].Name)
		assert.GreaterOrEqual(t, totals[0].Beats, last.Beats, what)
		assert.GreaterOrEqual(t, totals[0].Timeouts, last.Timeouts, what)
		last = totals[0]
	}
	check("both watched")
	assert.Equal(t, WatchdogTotals{Name: "worker", Beats: 12, Timeouts: 1}, last)
	flaky.Stop()
	check("the flaky one stopped")
	assert.Equal(t, WatchdogTotals{Name: "worker", Beats: 12, Timeouts: 1}, last)
	assert.Equal(t, uint64(10), s.Status().Watchdogs[0].Beats, "what a sum over Watchdogs would show")
	flaky.Beat()
	check("a Beat after Stop counts for nothing")
	assert.Equal(t, uint64(12), last.Beats)

	steady.Stop()
	check("none watched")
	assert.Empty(t, s.Status().Watchdogs)
	assert.Equal(t, WatchdogTotals{Name: "worker", Beats: 12, Timeouts: 1}, last)

	again := s.Watch("worker", time.Hour)
	defer again.Stop()
	again.Beat()
	check("a new one under the name")
	assert.Equal(t, WatchdogTotals{Name: "worker", Beats: 13, Timeouts: 1}, last)
}

// TestWatchdogLastBeatAfterClockStep: LastBeat is the Beat's time as the
// wall clock reads now, so that time() minus it, on a dashboard, is the
// Beat's age even after the wall clock was stepped between NewServer, the
// Beat and Status.
func TestWatchdogLastBeatAfterClockStep(t *testing.T) {
	s, _ := newReadyServer(t)
	w := s.Watch("loop", time.Hour)
	defer w.Stop()
	before := time.Now()
	w.Beat()
	after := time.Now()
	for _, step := range []time.Duration{0, time.Hour, -time.Hour} {
		assertWallBetween(t, s.status(steppedClock(s, step)).Watchdogs[0].LastBeat, before, after, step)
	}
}

// TestBeatTakesNoLockAndAllocatesNothing: a Beat on a met watchdog
// completes while another goroutine holds the Server's lock, and
// allocates nothing.
func TestBeatTakesNoLockAndAllocatesNothing(t *testing.T) {
	s, _ := newReadyServer(t)
	w := s.Watch("reconcile", time.Hour)
	defer w.Stop()
	w.Beat()
	assert.Zero(t, testing.AllocsPerRun(1000, w.Beat))
	assert.NoError(t, s.Ready())

	s.mu.Lock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 1000; i++ {
			w.Beat()
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Error("Beat waited for the lock")
	}
	s.mu.Unlock()
	<-done
}

// TestBeatRacesTheDeadline beats with gaps around the timeout from two
// goroutines while the timer, and the publications of a third goroutine's
// setters, mark deadlines. Right after a Beat, and for as long as no full
// timeout has passed since the latest Beat returned, the watchdog is met:
// never stuck unmet after a Beat. Once the Beats stop it goes unmet:
// never stuck met after a deadline.
func TestBeatRacesTheDeadline(t *testing.T) {
	const timeout = 3 * time.Millisecond
	s, _ := newReadyServer(t)
	w := s.Watch("racy", timeout)
	defer w.Stop()
	origin := time.Now()
	var latest atomic.Int64 // the largest clock reading taken before a Beat that has returned
	var beating sync.WaitGroup
	for g := 0; g < 2; g++ {
		beating.Add(1)
		go func() {
			defer beating.Done()
			for time.Since(origin) < 300*time.Millisecond {
				before := time.Since(origin)
				w.Beat()
				if err := s.Ready(); err != nil && time.Since(origin)-before < timeout {
					t.Errorf("unmet %v after a Beat: %v", time.Since(origin)-before, err)
					return
				}
				for l := latest.Load(); int64(before) > l && !latest.CompareAndSwap(l, int64(before)); l = latest.Load() {
				}
				time.Sleep(time.Duration(rand.Int64N(int64(2 * timeout))))
			}
		}()
	}
	stopped := make(chan struct{})
	var publishing sync.WaitGroup
	publishing.Add(1)
	go func() {
		defer publishing.Done()
		for {
			select {
			case <-stopped:
				return
			default:
				s.SetRegistered() // a latch already set: a publication, nothing more
			}
		}
	}()
	observed := make(chan int)
	go func() {
		n := 0
		defer func() { observed <- n }()
		for {
			select {
			case <-stopped:
				return
			default:
			}
			since := time.Duration(latest.Load())
			err := s.Ready()
			if age := time.Since(origin) - since; since > 0 && err != nil && age < timeout {
				t.Errorf("unmet %v after the latest Beat returned: %v", age, err)
				return
			}
			n++
		}
	}()
	beating.Wait()
	close(stopped)
	publishing.Wait()
	assert.Greater(t, <-observed, 100, "the observer sampled")
	eventually(t, func() bool { return errors.Is(s.Ready(), ErrSubsystemUnresponsive) }, "unmet once the Beats stop")
	st := s.Status().Watchdogs[0]
	assert.True(t, st.Overdue)
	assert.Positive(t, st.Timeouts)
	assert.False(t, internals(s).timerArmed)
	w.Beat()
	assert.NoError(t, s.Ready())
}

// BenchmarkWatchdogBeat is the cost of a Beat on a met watchdog, next to
// its floor: the clock read it cannot do without; and on one the config
// disabled, which is met for good.
func BenchmarkWatchdogBeat(b *testing.B) {
	s := NewServer(Config{}, discardLogger())
	w := s.Watch("loop", time.Hour)
	defer w.Stop()
	w.Beat()
	b.Run("floor_clock", func(b *testing.B) {
		b.ReportAllocs()
		var d time.Duration
		for i := 0; i < b.N; i++ {
			d += s.sinceEpoch()
		}
		_ = d
	})
	b.Run("beat", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			w.Beat()
		}
	})
	disabled := NewServer(Config{Watchdogs: map[string]Duration{"loop": 0}}, discardLogger()).Watch("loop", time.Hour)
	defer disabled.Stop()
	b.Run("beat_disabled", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			disabled.Beat()
		}
	})
	b.Run("beat_parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				w.Beat()
			}
		})
	})
}

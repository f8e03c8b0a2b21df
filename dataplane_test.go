package health

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// newPolledServer is a server with every latch set, on a fake clock that
// pollRuns passes a check period at a time.
func newPolledServer(t *testing.T) (*Server, *logBuffer, *fakeClock) {
	t.Helper()
	return newFakeClockReadyServer(t)
}

// pollRuns passes the check's periods on clk by hand until n results have
// fed readiness: first the run SetDataPlaneCheck starts at once, then a
// period at a time, each once no check is running, so that never more
// than one passes during a run (three would be a stall).
func pollRuns(t *testing.T, s *Server, clk *fakeClock, n uint64) {
	t.Helper()
	runs := func() uint64 { return s.Status().Check.Runs }
	if runs() == 0 {
		eventually(t, func() bool { return runs() > 0 }, "the first run's result")
	}
	for have := runs(); have < n; have = runs() {
		eventually(t, func() bool { return !internals(s).running }, "the running check's return")
		clk.advance(s.checkPeriod)
		eventually(t, func() bool { return runs() > have }, "the next run's result")
	}
}

// countingCheck wraps fn and reports the number of each call on calls. The
// poller records a result before it starts the next check, so the call
// numbered n+1 proves that n results have fed readiness.
func countingCheck(fn func() error) (check func() error, calls <-chan int) {
	ch := make(chan int, 1000)
	n := 0
	var mu sync.Mutex
	return func() error {
		mu.Lock()
		n++
		select {
		case ch <- n:
		default:
		}
		mu.Unlock()
		return fn()
	}, ch
}

// waitCalls reads from calls until the check has been called n times.
func waitCalls(t *testing.T, calls <-chan int, n int) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case got := <-calls:
			if got >= n {
				return
			}
		case <-timeout:
			t.Fatalf("the check was not called %d times", n)
		}
	}
}

func TestDataPlaneCheck(t *testing.T) {
	t.Run("runs at once, fails, recovers, logs each change once", func(t *testing.T) {
		s, logs, clk := newPolledServer(t)
		var failing atomic.Bool
		failing.Store(true)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s.SetDataPlaneCheck(ctx, func() error {
			if failing.Load() {
				return errPlantedCheck
			}
			return nil
		})
		pollRuns(t, s, clk, 4) // four failed results
		assert.ErrorIs(t, s.Ready(), ErrDataPlaneLost)
		assert.ErrorIs(t, s.Ready(), errPlantedCheck)
		rec := serve(s.Handler(), http.MethodGet, "/readyz")
		assert.Equal(t, "not ready: data plane lost\n", rec.Body.String())

		failing.Store(false)
		pollRuns(t, s, clk, 8) // four passing results
		assert.NoError(t, s.Ready())
		cancel()

		assert.Equal(t, 1, logs.count(`msg="health: data-plane check failed"`))
		assert.Equal(t, 1, logs.count("PLANTED-check-error-91bc"))
		assert.Equal(t, 1, logs.count(`level=INFO msg="health: data-plane check recovered"`))
		assert.Equal(t, 1, logs.count(`reason="data plane lost"`))
	})

	t.Run("never runs per probe", func(t *testing.T) {
		s, _ := newTestServer(t) // the real period: one call in this test's life
		check, calls := countingCheck(func() error { return nil })
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s.SetDataPlaneCheck(ctx, check)
		waitCalls(t, calls, 1)
		for i := 0; i < 1000; i++ {
			serve(s.Handler(), http.MethodGet, "/readyz")
		}
		cancel()
		assert.Empty(t, calls, "probes must not call the check")
	})

	t.Run("a panic is a failed check and the poller goes on", func(t *testing.T) {
		s, logs, clk := newPolledServer(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s.SetDataPlaneCheck(ctx, func() error { panic("PLANTED-panic-value") })
		pollRuns(t, s, clk, 2)
		cancel()
		assert.ErrorIs(t, s.Ready(), ErrDataPlaneLost)
		assert.Contains(t, s.Ready().Error(), "PLANTED-panic-value")
		assert.Equal(t, "not ready: data plane lost\n", serve(s.Handler(), "GET", "/readyz").Body.String())
		assert.Equal(t, 1, logs.count(`msg="health: data-plane check failed" err="data-plane check panicked: PLANTED-panic-value" stack=`))
		assert.Contains(t, logs.String(), "health.TestDataPlaneCheck", "the stack names the panicking function")
	})

	t.Run("a panic after failures is logged with its stack", func(t *testing.T) {
		s, logs, clk := newPolledServer(t)
		var n atomic.Int32
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s.SetDataPlaneCheck(ctx, func() error {
			if n.Add(1) <= 2 {
				return errPlantedCheck
			}
			panic("PLANTED-panic-after-failures")
		})
		pollRuns(t, s, clk, 4) // two failures, then panics
		cancel()
		assert.Equal(t, 1, logs.count(`msg="health: data-plane check failed" err="PLANTED-check-error`), "the first failure")
		assert.Equal(t, 1, logs.count(`msg="health: data-plane check failed" err="data-plane check panicked: PLANTED-panic-after-failures" stack=`), "the first panic, once")
	})

	t.Run("a second call replaces the first", func(t *testing.T) {
		s, _, clk := newPolledServer(t)
		first, firstStarted, releaseFirst := firstCallBlocks(errPlantedCheck)
		ctx := context.Background()
		s.SetDataPlaneCheck(ctx, first)
		<-firstStarted
		s.SetDataPlaneCheck(ctx, func() error { return nil })
		pollRuns(t, s, clk, 2)
		require.NoError(t, s.Ready())
		releaseFirst() // the first check returns its error now
		pollRuns(t, s, clk, 4)
		assert.NoError(t, s.Ready(), "the replaced check's result must feed nothing")
		assert.Equal(t, uint64(4), s.Status().Check.Runs, "nor count")
		s.SetDataPlaneCheck(ctx, nil)
	})

	t.Run("the earlier verdict stands until the new check's first result", func(t *testing.T) {
		s, _, clk := newPolledServer(t)
		s.SetDataPlaneCheck(context.Background(), failingCheck(errPlantedCheck))
		pollRuns(t, s, clk, 2)
		release := setBlockedCheck(t, s, nil)
		assert.ErrorIs(t, s.Ready(), ErrDataPlaneLost, "no readiness on no evidence")
		release()
		s.SetDataPlaneCheck(context.Background(), nil)
	})

	t.Run("nil fn stops the poller and drops the verdict", func(t *testing.T) {
		s, _, clk := newPolledServer(t)
		s.SetDataPlaneCheck(context.Background(), failingCheck(errPlantedCheck))
		pollRuns(t, s, clk, 2)
		require.ErrorIs(t, s.Ready(), ErrDataPlaneLost)
		s.SetDataPlaneCheck(context.Background(), nil)
		assert.NoError(t, s.Ready())
		assert.Equal(t, 200, serve(s.Handler(), "GET", "/readyz").Code)
	})

	t.Run("a hung check is a stall until it returns", func(t *testing.T) {
		s, logs, clk := newPolledServer(t)
		check, calls := countingCheck(func() error { return nil })
		hung, started, release := firstCallBlocks(nil)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s.SetDataPlaneCheck(ctx, func() error {
			_ = hung()
			return check()
		})
		<-started
		clk.advance(s.stallBound())
		require.ErrorIs(t, s.Ready(), ErrDataPlaneStalled)
		assert.Equal(t, "not ready: data plane check stalled\n", serve(s.Handler(), "GET", "/readyz").Body.String())
		assert.Empty(t, calls, "never two checks at once")
		release()
		pollRuns(t, s, clk, 2)
		assert.NoError(t, s.Ready())
		cancel()
		assert.Equal(t, 1, logs.count(`level=ERROR msg="health: data-plane check stalled" after=15s stack=`))
		assert.Equal(t, 1, logs.count(`msg="health: data-plane check recovered"`))
	})

	t.Run("a stall behind a failure reports the failure", func(t *testing.T) {
		s, _, clk := newPolledServer(t)
		second, secondStarted := make(chan struct{}), make(chan struct{})
		var n atomic.Int32
		s.SetDataPlaneCheck(context.Background(), func() error {
			if n.Add(1) == 2 {
				close(secondStarted)
				<-second
			}
			return errPlantedCheck
		})
		pollRuns(t, s, clk, 1)
		clk.advance(s.checkPeriod)
		<-secondStarted
		clk.advance(s.stallBound())
		require.True(t, internals(s).check.stalled)
		assert.ErrorIs(t, s.Ready(), ErrDataPlaneLost, "row 3 comes before row 4")
		close(second)
		s.SetDataPlaneCheck(context.Background(), nil)
	})

	t.Run("stops on ctx even while fn is blocked", func(t *testing.T) {
		s, _, _ := newPolledServer(t)
		check, started, release := firstCallBlocks(errPlantedCheck)
		ctx, cancel := context.WithCancel(context.Background())
		s.SetDataPlaneCheck(ctx, check)
		<-started
		cancel()
		release() // the poller exits as soon as fn returns
		eventually(t, func() bool { return errors.Is(s.Ready(), ErrDataPlaneLost) }, "the in-flight result counts")
		goleak.VerifyNone(t) // the poller has exited: what this test is about
		assert.ErrorIs(t, s.Ready(), ErrDataPlaneLost, "the verdict stays")
	})

	t.Run("a context already done runs nothing; nil ctx is Background", func(t *testing.T) {
		s, _ := newTestServer(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		s.SetDataPlaneCheck(ctx, func() error { panic("must not run") })
		var nilCtx context.Context
		check, calls := countingCheck(func() error { return nil })
		s.SetDataPlaneCheck(nilCtx, check)
		waitCalls(t, calls, 1)
		s.SetDataPlaneCheck(nilCtx, nil)
	})
}

// firstCallBlocks returns a check whose first call closes started and
// blocks until release is called; every call then returns result.
func firstCallBlocks(result error) (check func() error, started <-chan struct{}, release func()) {
	startedCh, releaseCh := make(chan struct{}), make(chan struct{})
	var first, released sync.Once
	check = func() error {
		first.Do(func() {
			close(startedCh)
			<-releaseCh
		})
		return result
	}
	return check, startedCh, func() { released.Do(func() { close(releaseCh) }) }
}

// setBlockedCheck sets on s a check of firstCallBlocks(result), with the
// test's context, and returns once its first call has started, blocked
// until release is called. The test's end releases it, and ends its
// poller.
func setBlockedCheck(t *testing.T, s *Server, result error) (release func()) {
	t.Helper()
	check, started, release := firstCallBlocks(result)
	t.Cleanup(release) // after t.Context() is done: the poller then exits
	s.SetDataPlaneCheck(t.Context(), check)
	<-started
	return release
}

// TestDataPlaneCheckPending is readiness row 3: a set check that has not
// returned yet has given no evidence, so the node is not ready.
func TestDataPlaneCheckPending(t *testing.T) {
	t.Run("from the call until the first result, set before SetDataPlaneReady", func(t *testing.T) {
		s, logs := newTestServer(t)
		s.checkPeriod = time.Hour // no stall can intervene
		s.SetRegistered()
		release := setBlockedCheck(t, s, nil)
		assert.ErrorIs(t, s.Ready(), ErrDataPlanePending, "row 2 comes before row 3")
		s.SetDataPlaneReady()
		assert.Equal(t, ErrDataPlaneCheckPending, s.Ready())
		rec := serve(s.Handler(), http.MethodGet, "/readyz")
		assert.Equal(t, 503, rec.Code)
		assert.Equal(t, "not ready: data plane check pending\n", rec.Body.String())

		release()
		eventually(t, func() bool { return s.Ready() == nil }, "ready once the first check passed")
		assert.Equal(t, []string{
			`level=INFO msg="health: readiness changed" ready=false reason="data plane not configured"`,
			`level=INFO msg="health: readiness changed" ready=false reason="data plane check pending"`,
			`level=INFO msg="health: readiness changed" ready=true after=…`,
		}, readinessChanges(logs), "never 200 on the latch alone")
	})

	t.Run("a first check that hangs is pending, then stalled", func(t *testing.T) {
		s, logs, clk := newFakeClockServer(t)
		// The stall bound is passed by hand once SetDataPlaneReady has
		// landed: a real one could pass before it, and no pending line
		// would be logged. TestDataPlaneStallBound times the real one.
		s.SetRegistered()
		release := setBlockedCheck(t, s, nil)
		s.SetDataPlaneReady()
		require.Equal(t, ErrDataPlaneCheckPending, s.Ready())
		clk.advance(s.stallBound())
		require.ErrorIs(t, s.Ready(), ErrDataPlaneStalled)
		assert.Equal(t, "not ready: data plane check stalled\n", serve(s.Handler(), "GET", "/readyz").Body.String())
		release()
		eventually(t, func() bool { return s.Ready() == nil }, "ready once it returned")
		assert.Equal(t, []string{
			`level=INFO msg="health: readiness changed" ready=false reason="data plane not configured"`,
			`level=INFO msg="health: readiness changed" ready=false reason="data plane check pending"`,
			`level=INFO msg="health: readiness changed" ready=false reason="data plane check stalled"`,
			`level=INFO msg="health: readiness changed" ready=true after=…`,
		}, readinessChanges(logs), "pending until stalled, never ready on no evidence")
	})

	t.Run("the stall timer ends pending", func(t *testing.T) {
		s, _, clk := newFakeClockServer(t)
		setLatches(s)
		setBlockedCheck(t, s, nil)
		clk.advance(s.stallBound() - 1)
		assert.Equal(t, ErrDataPlaneCheckPending, s.Ready())
		clk.advance(1)
		assert.ErrorIs(t, s.Ready(), ErrDataPlaneStalled)
		assert.Equal(t, "not ready: data plane check stalled\n", serve(s.Handler(), "GET", "/readyz").Body.String())
	})

	t.Run("a replacement keeps the earlier verdict, or pending with none", func(t *testing.T) {
		s, _ := newTestServer(t)
		s.checkPeriod = time.Hour
		setLatches(s)
		releaseFirst := setBlockedCheck(t, s, errPlantedCheck)
		releaseSecond := setBlockedCheck(t, s, nil)
		assert.Equal(t, ErrDataPlaneCheckPending, s.Ready(), "no verdict yet: row 3 stands")
		releaseFirst()
		releaseSecond()
		eventually(t, func() bool { return s.Ready() == nil }, "the new check's first result")

		releaseThird := setBlockedCheck(t, s, errPlantedCheck)
		assert.NoError(t, s.Ready(), "the earlier pass stands until the new check's first result")
		releaseThird()
		eventually(t, func() bool { return errors.Is(s.Ready(), ErrDataPlaneLost) }, "the new check's first result")
	})

	t.Run("a nil fn ends pending: latch-only readiness", func(t *testing.T) {
		s, _ := newTestServer(t)
		s.checkPeriod = time.Hour
		setLatches(s)
		setBlockedCheck(t, s, nil)
		require.Equal(t, ErrDataPlaneCheckPending, s.Ready())
		s.SetDataPlaneCheck(context.Background(), nil)
		assert.NoError(t, s.Ready())
		assert.Equal(t, "ok\n", serve(s.Handler(), "GET", "/readyz").Body.String())
	})

	t.Run("a ctx that ends before any verdict leaves it pending", func(t *testing.T) {
		s, _ := newTestServer(t)
		setLatches(s)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		s.SetDataPlaneCheck(ctx, func() error { panic("must not run") })
		goleak.VerifyNone(t) // waits for the poller to exit: nothing can change the verdict after
		assert.Equal(t, ErrDataPlaneCheckPending, s.Ready(), "a check that can no longer run cannot vouch")
		assert.Equal(t, "not ready: data plane check pending\n", serve(s.Handler(), "GET", "/readyz").Body.String())
	})
}

// TestCheckNow: the check runs at once in the poller's goroutine,
// coalesced, and the schedule restarts from the run it caused.
func TestCheckNow(t *testing.T) {
	t.Run("runs the check at once, never in the caller's goroutine, never waiting", func(t *testing.T) {
		s, _ := newReadyServer(t)
		s.checkPeriod = time.Hour
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		release := make(chan struct{})
		var n atomic.Int32
		check, calls := countingCheck(func() error {
			if n.Add(1) == 2 {
				<-release // the run CheckNow asked for hangs
			}
			return errPlantedCheck
		})
		s.SetDataPlaneCheck(ctx, check)
		waitCalls(t, calls, 1)
		returned := make(chan struct{})
		go func() {
			s.CheckNow()
			close(returned)
		}()
		waitCalls(t, calls, 2)
		select {
		case <-returned:
		case <-time.After(10 * time.Second):
			t.Fatal("CheckNow waited for the check")
		}
		close(release)
		eventually(t, func() bool { return s.Status().Check.Runs == 2 }, "the second run's result")
	})

	t.Run("any number of calls during a run add one run after it", func(t *testing.T) {
		s, _ := newReadyServer(t)
		s.checkPeriod = time.Hour // no tick in this test's life
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		releases := []chan struct{}{make(chan struct{}), make(chan struct{})}
		var n atomic.Int32
		check, calls := countingCheck(func() error {
			if i := n.Add(1); i <= 2 {
				<-releases[i-1]
			}
			return nil
		})
		s.SetDataPlaneCheck(ctx, check)
		waitCalls(t, calls, 1)
		for i := 0; i < 1000; i++ {
			s.CheckNow()
		}
		close(releases[0])
		waitCalls(t, calls, 2) // the one run the calls added
		p := internals(s).poller
		assert.Zero(t, len(p.asked), "no further run asked for while the second runs")
		close(releases[1])
		eventually(t, func() bool { return s.Status().Check.Runs == 2 }, "the second run's result")
		// Only a tick, an hour away, or a CheckNow can start a third.
		locked(s, func() {
			assert.Equal(t, uint64(2), p.run)
			assert.Zero(t, len(p.asked))
		})
		assert.Empty(t, calls)
	})

	t.Run("the next periodic run comes a full period after the one it caused", func(t *testing.T) {
		s, _, clk := newPolledServer(t)
		period := s.checkPeriod
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		times := make(chan time.Time, 10)
		s.SetDataPlaneCheck(ctx, func() error {
			times <- clk.now()
			return nil
		})
		first := <-times
		clk.advance(period / 2) // halfway to the tick
		s.CheckNow()
		triggered := <-times
		require.Equal(t, first.Add(period/2), triggered, "CheckNow ran at once, before the old schedule's tick")
		// The old schedule would tick at first+period, half a period
		// after the triggered run; the new one a full period after it.
		assert.Equal(t, triggered.Add(period), clk.tickerAt())
		clk.advance(period)
		assert.Equal(t, triggered.Add(period), <-times)
		cancel()
	})

	t.Run("does nothing without a check, after a nil fn or once ctx is done", func(t *testing.T) {
		s, _ := newReadyServer(t)
		s.CheckNow()
		assert.Equal(t, CheckStatus{}, s.Status().Check)

		check, calls := countingCheck(func() error { return nil })
		ctx, cancel := context.WithCancel(context.Background())
		s.SetDataPlaneCheck(ctx, check)
		waitCalls(t, calls, 1)
		cancel()
		goleak.VerifyNone(t) // the poller has exited: nothing can run a check
		runs := s.Status().Check.Runs
		for i := 0; i < 3; i++ {
			s.CheckNow()
		}
		goleak.VerifyNone(t)
		assert.Empty(t, calls)
		assert.Equal(t, runs, s.Status().Check.Runs)

		s.SetDataPlaneCheck(context.Background(), check)
		waitCalls(t, calls, 2)
		s.SetDataPlaneCheck(context.Background(), nil)
		goleak.VerifyNone(t)
		s.CheckNow()
		assert.Empty(t, calls)
	})
}

// TestCheckGoexit: a check that calls runtime.Goexit (t.FailNow in a check,
// say) is a failed check, logged with where it was called, and the poller
// goes on; no recover can see it, and without care it would end the
// poller and show only as a stall, three periods later.
func TestCheckGoexit(t *testing.T) {
	// pollGoexiting polls fn as s's check, its periods passed by hand,
	// until the test cancels or ends.
	pollGoexiting := func(t *testing.T, fn func() error) (s *Server, logs *logBuffer, clk *fakeClock, cancel func()) {
		s, logs, clk = newPolledServer(t)
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		s.SetDataPlaneCheck(ctx, fn)
		return s, logs, clk, cancel
	}
	t.Run("once: a failure, then polling goes on", func(t *testing.T) {
		var n atomic.Int32
		s, logs, clk, cancel := pollGoexiting(t, func() error {
			if n.Add(1) == 1 {
				runtime.Goexit()
			}
			return nil
		})
		pollRuns(t, s, clk, 2)
		assert.NoError(t, s.Ready())
		cancel()
		st := s.Status().Check
		assert.GreaterOrEqual(t, st.Runs, uint64(2))
		assert.Equal(t, uint64(1), st.Failures)
		assert.Zero(t, st.Panics, "a Goexit is not a panic")
		assert.Zero(t, st.Stalls, "nor a stall")
		assert.Equal(t, 1, logs.count(`level=ERROR msg="health: data-plane check failed" err="data-plane check called runtime.Goexit" stack=`))
		assert.Contains(t, logs.String(), "health.TestCheckGoexit", "the stack names the function that called it")
		assert.Equal(t, 1, logs.count(`msg="health: data-plane check recovered"`))
	})

	t.Run("always: failing, logged once, polling at its period", func(t *testing.T) {
		s, logs, clk, cancel := pollGoexiting(t, func() error { runtime.Goexit(); return nil })
		pollRuns(t, s, clk, 5)
		err := s.Ready()
		assert.ErrorIs(t, err, ErrDataPlaneLost)
		assert.Equal(t, "data plane lost: data-plane check called runtime.Goexit", err.Error())
		assert.Equal(t, "not ready: data plane lost\n", serve(s.Handler(), "GET", "/readyz").Body.String())
		st := s.Status().Check
		assert.GreaterOrEqual(t, st.Failures, uint64(5))
		assert.Equal(t, st.Runs, st.Failures)
		assert.Equal(t, 1, logs.count(`msg="health: data-plane check failed"`))
		cancel()
		// TestMain's leak check: the last of the poller's goroutines exits with ctx.
	})

	t.Run("after failures, a Goexit is logged with its stack", func(t *testing.T) {
		var n atomic.Int32
		s, logs, clk, cancel := pollGoexiting(t, func() error {
			if n.Add(1) <= 2 {
				return errPlantedCheck
			}
			runtime.Goexit()
			return nil
		})
		pollRuns(t, s, clk, 4)
		cancel()
		assert.Equal(t, 1, logs.count(`msg="health: data-plane check failed" err="PLANTED-check-error`))
		assert.Equal(t, 1, logs.count(`msg="health: data-plane check failed" err="data-plane check called runtime.Goexit" stack=`))
	})
}

// TestReplacingCheckPublishesPassedDeadline: replacing the check catches
// up with the clock, and what it finds (a deadline passed before its
// timer ran) is published at once, not left for some later input.
func TestReplacingCheckPublishesPassedDeadline(t *testing.T) {
	s, _, clk := newFakeClockReadyServer(t)
	s.SetDataPlaneCheck(t.Context(), func() error { return nil })
	pollRuns(t, s, clk, 1)
	w := s.Watch("reconcile", 10*time.Second)
	defer w.Stop()
	w.Beat()
	clk.jump(11 * time.Second) // the deadline passes; its timer has not run
	slow := make(chan struct{})
	defer close(slow)
	s.SetDataPlaneCheck(t.Context(), func() error { <-slow; return nil })
	assert.ErrorIs(t, s.Ready(), ErrSubsystemUnresponsive)
	assert.Equal(t, []error{ErrSubsystemUnresponsive}, s.Status().Unmet)
}

// TestReplacedCheckPanicIsLogged: a replaced check's result feeds nothing,
// but its panic is a bug in the check, logged with its stack.
func TestReplacedCheckPanicIsLogged(t *testing.T) {
	s, logs := newTestServer(t)
	setLatches(s)
	release, started := make(chan struct{}), make(chan struct{})
	s.SetDataPlaneCheck(t.Context(), func() error { close(started); <-release; panic("nil map write in wg.Peers") })
	<-started
	s.SetDataPlaneCheck(t.Context(), func() error { return nil })
	close(release)
	eventually(t, func() bool {
		return logs.count(`level=ERROR msg="health: replaced data-plane check failed" err="data-plane check panicked: nil map write in wg.Peers" stack=`) == 1
	}, "the replaced check's panic logged")
	assert.Zero(t, s.Status().Check.Panics, "counted only where a result feeds readiness")
}

// TestReadyWrapsTheLastCheckError: a check error that reads as the one
// before it is still the one Ready wraps, so that errors.Is finds it.
func TestReadyWrapsTheLastCheckError(t *testing.T) {
	s, _, clk := newFakeClockReadyServer(t)
	first, second := errors.New("wg0: link not found"), errors.New("wg0: link not found")
	var n atomic.Int32
	s.SetDataPlaneCheck(t.Context(), func() error {
		if n.Add(1) == 1 {
			return first
		}
		return second
	})
	pollRuns(t, s, clk, 2)
	require.Equal(t, second, s.Status().Check.LastError)
	assert.ErrorIs(t, s.Ready(), second)
}

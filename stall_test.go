package health

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// passesThenHangs returns a check whose first call passes and whose
// second closes hung and hangs until release is called; every later call
// passes.
func passesThenHangs() (check func() error, hung <-chan struct{}, release func()) {
	hungCh, releaseCh := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	check = func() error {
		if calls.Add(1) == 2 {
			close(hungCh)
			<-releaseCh
		}
		return nil
	}
	var released atomic.Bool
	return check, hungCh, func() {
		if released.CompareAndSwap(false, true) {
			close(releaseCh)
		}
	}
}

// TestVerdictStallBoundPassedBeforeItsTimer: a check that passed runs
// again and hangs; its stall bound passes, and before the stall timer
// runs the last latch arrives. That publication counts the check as
// stalled: the node never turns ready on the earlier pass, and the stall
// is logged and counted once.
func TestVerdictStallBoundPassedBeforeItsTimer(t *testing.T) {
	s, logs, clk := newFakeClockServer(t)
	s.SetRegistered()
	check, hung, release := passesThenHangs()
	t.Cleanup(release) // after t.Context() is done: the poller then exits
	s.SetDataPlaneCheck(t.Context(), check)
	eventually(t, func() bool { return s.Status().Check.Runs == 1 }, "the first check's pass")
	s.CheckNow()
	<-hung
	seen := len(readinessChanges(logs))

	clk.jump(s.stallBound()) // the stall bound; the stall timer has not run
	s.SetDataPlaneReady()
	require.ErrorIs(t, s.Ready(), ErrDataPlaneStalled)
	assert.Equal(t, uint64(1), s.Status().Check.Stalls)
	clk.advance(0) // the stall timer, late
	assert.Equal(t, uint64(1), s.Status().Check.Stalls)

	release()
	eventually(t, func() bool { return s.Ready() == nil }, "ready once the check returned")
	assert.Equal(t, []string{
		`level=INFO msg="health: readiness changed" ready=false reason="data plane check stalled"`,
		`level=INFO msg="health: readiness changed" ready=true after=…`,
	}, readinessSince(logs, seen), "never ready on the earlier pass")
	assert.Equal(t, 1, logs.count(`level=ERROR msg="health: data-plane check stalled" after=15s`))
}

// TestDataPlaneStallBound: a check that has not returned is a stall at
// three periods from its start, never before, and within half a period
// after: a timer marks it, not the next poll.
func TestDataPlaneStallBound(t *testing.T) {
	const period = 200 * time.Millisecond
	const bound, margin = 3 * period, period / 2 // the contract's three periods
	s, _ := newTestServer(t)
	s.checkPeriod = period
	setLatches(s)
	before := time.Now() // before the poller's stall timer starts
	release := setBlockedCheck(t, s, nil)
	started := time.Now() // after the check started, so after the timer did
	defer release()
	for {
		err := s.Ready()
		read := time.Now()
		if read.Sub(before) >= bound {
			break
		}
		require.Equal(t, ErrDataPlaneCheckPending, err, "%v after the check started", read.Sub(started))
		time.Sleep(time.Millisecond) // the sampling rate, not a wait for anything
	}
	for !errors.Is(s.Ready(), ErrDataPlaneStalled) {
		require.Less(t, time.Since(started), bound+margin, "no stall within %v of the check's start", bound+margin)
		time.Sleep(time.Millisecond)
	}
	assert.Equal(t, uint64(1), s.Status().Check.Stalls)
}

// stuckInNetlink stands for a check's netlink call that never returns:
// the frame a stalled check's stack must show.
func stuckInNetlink(release <-chan struct{}) error {
	<-release
	return nil
}

// TestStalledCheckSaysWhere: a stalled check's ERROR line carries the
// stack of the check's goroutine, that goroutine's alone, cut at 16 KiB;
// Status().Check shows it while the check is stalled. It is taken once
// per stall, outside the Server's lock, never per probe.
func TestStalledCheckSaysWhere(t *testing.T) {
	long := strings.Repeat("main.deep()\n\t/src/main.go:1 +0x1\n", 1000) // 33 KiB of frames
	for _, tc := range []struct {
		name string
		dump func(id uint64) func([]byte) int // nil: the runtime's
		want func(t *testing.T, id uint64, stack string)
	}{
		{"the runtime's", nil, func(t *testing.T, id uint64, stack string) {
			header, _, _ := strings.Cut(stack, "\n")
			assert.Equal(t, fmt.Sprintf("goroutine %d [chan receive]:", id), header)
			assert.Contains(t, stack, "\ngithub.com/meshnode/health.stuckInNetlink(")
			assert.Equal(t, 1, strings.Count(stack, "goroutine "+strconv.FormatUint(id, 10)+" ["), "that goroutine's stack alone")
			assert.NotContains(t, stack, "\n\ngoroutine ")
		}},
		{"longer than 16 KiB", func(id uint64) func([]byte) int {
			return func(buf []byte) int {
				return copy(buf, fmt.Sprintf("goroutine %d [chan receive]:\n%s\ngoroutine 1 [running]:\nmain.main()\n", id, long))
			}
		}, func(t *testing.T, id uint64, stack string) {
			keep := (fmt.Sprintf("goroutine %d [chan receive]:\n", id) + long)[:maxStack-len(stackCut)]
			assert.Equal(t, keep[:strings.LastIndex(keep, "\n")]+stackCut, stack, "cut at a line end, saying so")
			assert.LessOrEqual(t, len(stack), maxStack)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, logs, clk := newFakeClockReadyServer(t)
			ids := make(chan uint64, 1)
			release := make(chan struct{})
			t.Cleanup(func() { close(release) }) // after t.Context() is done: the poller then exits
			s.SetDataPlaneCheck(t.Context(), func() error {
				select {
				case ids <- goroutineID():
				default: // a later run's
				}
				return stuckInNetlink(release)
			})
			id := <-ids
			eventually(t, func() bool { return goroutineHeader(id) == fmt.Sprintf("goroutine %d [chan receive]:", id) }, "the check parked in its call")
			dump := dumpAll
			if tc.dump != nil {
				dump = tc.dump(id)
			}
			dumps, locked, dumped := lockWatchingDump(s, dump)

			clk.advance(s.stallBound())
			require.ErrorIs(t, s.Ready(), ErrDataPlaneStalled)
			<-dumped
			eventually(t, func() bool { return s.Status().Check.Stack != "" }, "the stalled check's stack")
			stack := s.Status().Check.Stack
			tc.want(t, id, stack)
			assert.False(t, strings.HasSuffix(stack, "\n"))
			assert.Equal(t, 1, logs.count(`level=ERROR msg="health: data-plane check stalled" after=15s stack=`+strconv.Quote(stack)),
				"the line carries the same text")

			for range 100 {
				serve(s.Handler(), "GET", "/readyz")
				s.Status()
				clk.advance(time.Second)
			}
			assert.Equal(t, int32(1), dumps.Load(), "once per stall")
			assert.Zero(t, locked.Load(), "never under the lock")

			release <- struct{}{}
			eventually(t, func() bool { return s.Ready() == nil }, "ready once it returned")
			assert.Empty(t, s.Status().Check.Stack, "no stack once the check returned")
		})
	}
}

func stuckReplacedCheck(release <-chan struct{}) error { <-release; return nil }
func stuckNewCheck(release <-chan struct{}) error      { <-release; return nil }

// TestReplacedStalledCheckStallsAgain: a check that stalls while the
// stalled verdict of the one it replaced stands is logged and located
// too: Status shows where the new one is stuck, not the exited goroutine
// of the old.
func TestReplacedStalledCheckStallsAgain(t *testing.T) {
	s, logs, clk := newFakeClockReadyServer(t)
	releaseOld, releaseNew := make(chan struct{}), make(chan struct{})
	startedOld, startedNew := make(chan struct{}), make(chan struct{}, 1)
	s.SetDataPlaneCheck(t.Context(), func() error { close(startedOld); return stuckReplacedCheck(releaseOld) })
	<-startedOld
	clk.advance(s.stallBound())
	eventually(t, func() bool { return s.Status().Check.Stack != "" }, "the first stall's stack")
	s.SetDataPlaneCheck(t.Context(), func() error { startedNew <- struct{}{}; return stuckNewCheck(releaseNew) })
	defer close(releaseNew)
	<-startedNew
	close(releaseOld) // the replaced check returns; its poller exits
	clk.advance(s.stallBound() + time.Second)
	eventually(t, func() bool { return strings.Contains(s.Status().Check.Stack, "stuckNewCheck") }, "the new stall's stack")
	waitLogWritten(s)
	assert.Equal(t, uint64(2), s.Status().Check.Stalls)
	assert.Equal(t, 2, logs.count(`msg="health: data-plane check stalled"`))
}

// TestLateReturnIsAStall: a check that returns past the stall bound
// before the stall's timer ran still stalled: it is counted, and logged,
// with no stack left to show.
func TestLateReturnIsAStall(t *testing.T) {
	s, logs, clk := newFakeClockReadyServer(t)
	release, started := make(chan struct{}), make(chan struct{}, 1)
	s.SetDataPlaneCheck(t.Context(), func() error {
		select {
		case started <- struct{}{}:
			<-release
		default:
		}
		return nil
	})
	<-started
	clk.jump(s.stallBound() + 5*time.Second) // past the bound; its timer has not run
	close(release)
	eventually(t, func() bool { return s.Status().Check.Runs == 1 }, "the check's return")
	waitLogWritten(s)
	assert.Equal(t, uint64(1), s.Status().Check.Stalls)
	assert.Equal(t, 1, logs.count(`msg="health: data-plane check stalled" after=15s stack="the check returned after 20s, before its stall was seen"`), logs.String())
	assert.NoError(t, s.Ready(), "its result decides")
}

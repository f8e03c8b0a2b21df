package health

import (
	"sync/atomic"
	"testing"

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

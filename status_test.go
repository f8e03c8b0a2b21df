package health

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

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

func TestStatusUnmet(t *testing.T) {
	tests := []struct {
		name  string
		set   func(s *Server)
		unmet []error
	}{
		{"fresh server", func(s *Server) {}, []error{ErrRegistrationPending, ErrDataPlanePending}},
		{"ready", func(s *Server) {
			s.SetRegistered()
			s.SetDataPlaneReady()
		}, nil},
		{"check pending", func(s *Server) {
			s.SetRegistered()
			s.SetDataPlaneReady()
			setCheckVerdict(s, checkVerdict{pending: true})
		}, []error{ErrDataPlaneCheckPending}},
		{"a stopped subsystem behind stopped and degraded delivery", func(s *Server) {
			s.SetRegistered()
			s.SetDataPlaneReady()
			s.SetSubsystemStopped(plantedSubsystem)
			s.SetDeliveryStopped()
			s.SetDeliveryMode(DeliveryModeDegradedPolling)
		}, []error{ErrDeliveryStopped, ErrDeliveryDegraded, ErrSubsystemStopped}},
		{"an unresponsive loop behind a stopped subsystem", func(s *Server) {
			s.SetRegistered()
			s.SetDataPlaneReady()
			s.Watch(plantedSubsystem, time.Hour)
			s.SetSubsystemStopped(plantedSubsystem)
		}, []error{ErrSubsystemStopped, ErrSubsystemUnresponsive}},
		{"everything unmet at once", func(s *Server) {
			s.Watch(plantedSubsystem, time.Hour)
			s.SetSubsystemStopped(plantedSubsystem)
			s.SetDeliveryMode("")
			s.SetDeliveryStopped()
			setCheckVerdict(s, checkVerdict{err: errPlantedCheck, stalled: true})
		}, []error{ErrRegistrationPending, ErrDataPlanePending, ErrDataPlaneLost, ErrDataPlaneStalled,
			ErrDeliveryStopped, ErrDeliveryDegraded, ErrSubsystemStopped, ErrSubsystemUnresponsive}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newTestServer(t)
			tc.set(s)
			st := s.Status()
			assert.Equal(t, tc.unmet, st.Unmet, "the sentinels themselves, in table order")
			if len(tc.unmet) > 0 {
				assert.ErrorIs(t, s.Ready(), tc.unmet[0], "Ready names the first of them")
			}
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
	defer goleak.VerifyNone(t)
	s, _ := newPolledServer(t)
	assert.Equal(t, CheckStatus{}, s.Status().Check, "no check set")

	begin := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	check, started, release := scriptedCheck()
	defer release(6)
	s.SetDataPlaneCheck(ctx, check)
	require.Equal(t, 5, <-started)
	eventually(t, func() bool { return s.Status().Check.Stalls == 1 }, "the fifth check stalls")
	st := s.Status().Check
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

func TestStatusCheckCountsOnlyResultsThatFeedReadiness(t *testing.T) {
	defer goleak.VerifyNone(t)
	s, _ := newTestServer(t)
	s.checkPeriod = time.Hour
	first, started, releaseFirst := firstCallBlocks(errPlantedCheck)
	defer releaseFirst()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.SetDataPlaneCheck(ctx, first)
	<-started
	s.SetDataPlaneCheck(ctx, failingCheck(nil))
	eventually(t, func() bool { return s.Status().Check.Runs == 1 }, "the second check returns")
	releaseFirst()
	cancel()
	goleak.VerifyNone(t) // the first check's poller has recorded what it would
	assert.Equal(t, uint64(1), s.Status().Check.Runs)
	assert.Zero(t, s.Status().Check.Failures, "the replaced check's failure is not counted")
}

func TestStatusConns(t *testing.T) {
	s, _ := newTestServer(t)
	assert.Equal(t, ConnStatus{}, s.Status().Conns)
	s.conns.held.Store(3)
	s.conns.limit.Store(256)
	s.conns.accepted.Store(40)
	s.conns.evicted.Store(7)
	s.conns.lastEviction.Store(time.Now().UnixNano())
	assert.Equal(t, ConnStatus{Held: 3, Limit: 256, Accepted: 40, Evicted: 7, Pressure: true}, s.Status().Conns)
}

// TestStatusIsASnapshot checks that Status hands out a copy: a caller that
// changes its Unmet changes nothing the next caller sees.
func TestStatusIsASnapshot(t *testing.T) {
	s, _ := newTestServer(t)
	st := s.Status()
	require.NotEmpty(t, st.Unmet)
	st.Unmet[0] = errors.New("changed by a caller")
	assert.Equal(t, ErrRegistrationPending, s.Status().Unmet[0])
	assert.Equal(t, http.StatusServiceUnavailable, serve(s.Handler(), "GET", "/readyz").Code)
}

package health

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"
)

// dataPlaneCheckPeriod is how often the poller runs the data-plane check.
// Probes only read the last verdict, so this, not the kubelet's probe rate,
// sets how often the check costs the node anything.
const dataPlaneCheckPeriod = 5 * time.Second

// stallPeriods is the stall bound in periods: a check that has not returned
// after three periods has missed two verdicts, long enough that a slow check
// is not mistaken for a hung one.
const stallPeriods = 3

func (s *Server) stallBound() time.Duration { return stallPeriods * s.checkPeriod }

// checkVerdict is the data-plane check's contribution to readiness. The zero
// value is "no check set": readiness rests on the latches alone. Setting a
// check makes it pending, because a check that has not returned has given
// no evidence that the data plane works (readiness row 3).
type checkVerdict struct {
	pending bool  // a check is set and none has returned or stalled yet
	err     error // the last check's error; nil when it passed or none returned yet
	stalled bool  // a check has been running longer than the stall bound
}

// checkCounters count what the checks did, for Status. They are guarded by
// Server.mu, like the verdict they explain, so that a snapshot is
// consistent: Failures never exceeds Runs, and a failure in Unmet is
// already counted. Only the poller and Status touch them, never a probe.
type checkCounters struct {
	runs, failures, panics, stalls uint64
	lastDuration                   time.Duration
	lastReturned                   time.Time
	lastErr                        error
}

// record counts a check that returned err after running from start to end.
func (cc *checkCounters) record(err error, start, end time.Time) {
	cc.runs++
	if err != nil {
		cc.failures++
	}
	if _, ok := err.(*checkPanic); ok {
		cc.panics++
	}
	cc.lastDuration = end.Sub(start)
	cc.lastReturned = end
	cc.lastErr = err
}

func (cc *checkCounters) status(installed bool) CheckStatus {
	return CheckStatus{
		Installed:    installed,
		Runs:         cc.runs,
		Failures:     cc.failures,
		Panics:       cc.panics,
		Stalls:       cc.stalls,
		LastDuration: cc.lastDuration,
		LastReturned: cc.lastReturned,
		LastError:    cc.lastErr,
	}
}

// poller is one SetDataPlaneCheck's background loop. Its fields other than
// cancel are guarded by Server.mu.
type poller struct {
	cancel   context.CancelFunc
	run      uint64 // the number of the latest check started
	inFlight bool   // check number run has started and not returned
}

// SetDataPlaneCheck runs fn at once in a background goroutine, then every
// 5 s until ctx is done, and feeds each result into readiness; a probe only
// reads the last verdict, so fn never runs in the request path, however
// many probes arrive. A check that overruns the period is followed at once
// by the next, never overlapped; one that has not returned after three
// periods makes readiness report a stall until it does.
//
// Readiness needs evidence: from this call until the first check returns
// (or stalls), /readyz answers "data plane check pending" and Ready
// returns ErrDataPlaneCheckPending, whatever the latches say. So an agent
// that uses a check sets it before SetDataPlaneReady: the node then goes
// from "data plane not configured" to "data plane check pending" to ready,
// and never answers 200 on the latch alone while its first check runs.
//
// A second call replaces the first: the earlier poller stops and its
// results, even one still in flight, are discarded. The earlier verdict
// (a pass, a failure, a stall, or still pending) stands until the new
// fn's first result, so a replacement cannot make the node ready for a
// moment on no evidence. A nil fn stops any poller and drops the verdict,
// returning to latch-only readiness.
//
// A panic in fn is recovered and counts as a failed check whose error
// carries the panic value and stack. When ctx is done the poller exits as
// soon as any running fn returns, and the last verdict stays; if no check
// has returned by then, the check stays pending for good, because a check
// that can no longer run cannot vouch for the data plane. A nil ctx means
// context.Background().
func (s *Server) SetDataPlaneCheck(ctx context.Context, fn func() error) {
	ctx = contextOrBackground(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	replacing := s.poller != nil
	if replacing {
		s.poller.cancel()
		s.poller = nil
	}
	if fn == nil {
		s.setCheck(checkVerdict{})
		return
	}
	pctx, cancel := context.WithCancel(ctx)
	p := &poller{cancel: cancel}
	s.poller = p
	if !replacing {
		s.setCheck(checkVerdict{pending: true})
	}
	go s.poll(pctx, p, fn)
}

func (s *Server) poll(ctx context.Context, p *poller, fn func() error) {
	defer p.cancel() // releases the context's resources once the loop is over
	ticker := time.NewTicker(s.checkPeriod)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		default:
		}
		s.runCheck(p, fn)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// runCheck runs one check in the poller's goroutine. A timer, not a second
// goroutine, watches for a stall, so a hung fn costs one goroutine, never
// more, and nothing is left behind when it returns.
func (s *Server) runCheck(p *poller, fn func() error) {
	s.mu.Lock()
	p.run++
	p.inFlight = true
	run := p.run
	s.mu.Unlock()

	// start is read before the timer is armed, so that a check that
	// stalled has a duration of at least the stall bound.
	start := time.Now()
	stall := time.AfterFunc(s.stallBound(), func() { s.markStalled(p, run) })
	err := callCheck(fn)
	end := time.Now()
	stall.Stop()

	s.mu.Lock()
	defer s.mu.Unlock()
	p.inFlight = false
	if s.poller != p {
		return // replaced while fn ran: this result feeds nothing
	}
	s.checks.record(err, start, end)
	s.setCheck(checkVerdict{err: err})
}

// markStalled is the stall timer's callback. It checks that the check it
// was armed for is still the one running, because the timer can fire just
// as fn returns.
func (s *Server) markStalled(p *poller, run uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.poller != p || p.run != run || !p.inFlight {
		return
	}
	s.checks.stalls++
	s.setCheck(checkVerdict{err: s.check.err, stalled: true})
}

// setCheck records the check's verdict, logs it once if it changed between
// passing, failing and stalled (never once per poll), and updates readiness.
// s.mu must be held.
func (s *Server) setCheck(next checkVerdict) {
	prev := s.check
	s.check = next
	switch {
	case next.stalled && !prev.stalled:
		s.logger.Error("health: data-plane check stalled", "after", s.stallBound())
	case next.stalled:
	case next.err != nil && (prev.err == nil || prev.stalled || isPanic(next.err) && !isPanic(prev.err)):
		// A panic after failures is logged too: its value and stack
		// point at a bug in the check, which a plain failure does not.
		attrs := []any{"err", next.err}
		if p, ok := next.err.(*checkPanic); ok {
			attrs = append(attrs, "stack", string(p.stack))
		}
		s.logger.Error("health: data-plane check failed", attrs...)
	case next.err == nil && (prev.err != nil || prev.stalled) && s.poller != nil:
		s.logger.Info("health: data-plane check recovered")
	}
	s.update()
}

// checkPanic is a panic recovered from the check, kept as an error so that
// it counts as a failed check: unrecovered, it would kill the agent, and the
// restart runs the drain path.
type checkPanic struct {
	value any
	stack []byte
}

func (p *checkPanic) Error() string {
	return fmt.Sprintf("data-plane check panicked: %v", p.value)
}

func isPanic(err error) bool {
	_, ok := err.(*checkPanic)
	return ok
}

func callCheck(fn func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &checkPanic{value: v, stack: debug.Stack()}
		}
	}()
	return fn()
}

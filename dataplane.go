package health

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"
)

// dataPlaneCheckPeriod is how often the poller runs the data-plane check.
// Probes only read the last verdict, so this, not the kubelet's probe rate,
// sets how often the check costs the node anything.
const dataPlaneCheckPeriod = 5 * time.Second

// checkVerdict is the data-plane check's contribution to readiness. The zero
// value holds nothing back: no check is set, or the last one passed.
// Setting a check makes it pending (ErrDataPlaneCheckPending): a check that
// has not returned has given no evidence that the data plane works.
type checkVerdict struct {
	pending bool   // a check is set and none has returned or stalled yet
	err     error  // the last check's error; nil when it passed or none returned yet
	stalled bool   // a check has been running longer than the stall bound
	stack   string // while stalled, the stall's ERROR line's stack, once taken
}

// checkCounters count what the checks did, for Status. They are guarded by
// Server.mu, like the verdict they explain, so that a snapshot is
// consistent: Failures never exceeds Runs, and a failure in Unmet is
// already counted. Only the poller and Status touch them, never a probe.
type checkCounters struct {
	runs, failures, panics, stalls uint64
	lastDuration                   time.Duration
	lastReturned                   time.Duration // when the last returned, since Server.epoch (once runs > 0)
	lastErr                        error
}

// record counts a check that returned err after running for duration,
// at returned since Server.epoch.
func (cc *checkCounters) record(err error, duration, returned time.Duration) {
	cc.runs++
	if err != nil {
		cc.failures++
	}
	if _, ok := err.(*checkPanic); ok {
		cc.panics++
	}
	cc.lastDuration = duration
	cc.lastReturned = returned
	cc.lastErr = err
}

// status is CheckStatus at the clock reading now.
func (cc *checkCounters) status(installed bool, now clockReading) CheckStatus {
	st := CheckStatus{
		Installed:    installed,
		Runs:         cc.runs,
		Failures:     cc.failures,
		Panics:       cc.panics,
		Stalls:       cc.stalls,
		LastDuration: cc.lastDuration,
		LastError:    cc.lastErr,
	}
	if cc.runs > 0 {
		st.LastReturned = now.at(cc.lastReturned)
	}
	return st
}

// poller is one SetDataPlaneCheck's background loop. Its fields other than
// cancel and asked are guarded by Server.mu.
type poller struct {
	cancel context.CancelFunc
	// asked holds CheckNow's request for a run. One slot, written without
	// blocking, is what coalesces any number of calls into one run.
	asked    chan struct{}
	run      uint64        // the number of the latest check started
	inFlight bool          // check number run has started and not returned
	started  time.Duration // when check number run started, since Server.epoch
	goid     uint64        // the goroutine running check number run: its stack is a stall's
	stalled  bool          // check number run has been counted stalled
}

// checkInstalled reports whether a data-plane check is set: its ctx may be
// done, and its verdict stands. s.mu must be held.
func (s *Server) checkInstalled() bool { return s.poller != nil }

// SetDataPlaneCheck runs fn in a background goroutine (the poller) at once,
// then every 5 s until ctx (nil: Background) is done; probes read only the
// last verdict, pending until one returns: so set the check before
// SetDataPlaneReady. Runs never overlap; one running past three periods is
// a stall, logged with the stack of fn's goroutine, where it is stuck.
//
// A second call replaces the first, whose verdict stands until the new
// fn's first. A nil fn stops the poller and drops the verdict. A panic or
// runtime.Goexit in fn is a failed check, logged with its stack. Once ctx
// is done the poller exits as soon as fn returns; the verdict stays.
func (s *Server) SetDataPlaneCheck(ctx context.Context, fn func() error) {
	ctx = contextOrBackground(ctx)
	s.mu.Lock()
	defer s.unlock()
	s.expire() // the verdict that stands counts a stall its timer has not yet reported
	replacing := s.checkInstalled()
	if replacing {
		s.poller.cancel()
		s.poller = nil
	}
	if fn == nil {
		s.setCheck(checkVerdict{})
		return
	}
	pctx, cancel := context.WithCancel(ctx)
	p := &poller{cancel: cancel, asked: make(chan struct{}, 1)}
	s.poller = p
	if replacing {
		s.update() // what expire found: the verdict that stands is published as it is now
	} else {
		s.setCheck(checkVerdict{pending: true})
	}
	go s.poll(pctx, p, fn)
}

// CheckNow asks the poller to run the check now, for when the agent sees the
// data plane change; it never waits for the check. Calls during a run
// coalesce into one run after it, and the next periodic run comes a full
// period after that. Without a check, or once its ctx is done, it does
// nothing.
func (s *Server) CheckNow() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.checkInstalled() {
		return
	}
	select {
	case s.poller.asked <- struct{}{}:
	default: // a run is asked for already: this call is part of it
	}
}

func (s *Server) poll(ctx context.Context, p *poller, fn func() error) {
	s.pollFrom(ctx, p, fn, s.clock.newTicker(s.checkPeriod), true)
}

// pollFrom is the poller's loop: it runs fn at once when runNow, then on
// every tick of ticker and at every CheckNow, until ctx is done.
//
// A fn that calls runtime.Goexit ends the goroutine it runs in, whatever
// the loop does; runCheck counts it as a failed check, and the deferred
// call here carries the loop on in a new goroutine, from the next tick, so
// that the poller survives a Goexit as it survives a panic. A check that
// always calls it costs a goroutine start per period, never a spin.
func (s *Server) pollFrom(ctx context.Context, p *poller, fn func() error, ticker ticker, runNow bool) {
	ended := false
	defer func() {
		if !ended {
			go s.pollFrom(ctx, p, fn, ticker, false)
			return
		}
		ticker.Stop()
		p.cancel() // releases the context's resources once the loop is over
	}()
	for runNow || nextRun(ctx, p, ticker) {
		runNow = false
		if ctx.Err() != nil {
			break
		}
		// This run serves a CheckNow made before it starts, and the
		// next periodic one comes a full period after it.
		select {
		case <-p.asked:
		default:
		}
		ticker.Reset(s.checkPeriod)
		s.runCheck(p, fn)
	}
	ended = true
}

// nextRun waits for a tick or a CheckNow. It returns false once ctx is
// done.
func nextRun(ctx context.Context, p *poller, ticker ticker) bool {
	select {
	case <-ctx.Done():
		return false
	case <-ticker.C():
	case <-p.asked:
	}
	return true
}

// runCheck runs one check in the poller's goroutine. A timer, not a second
// goroutine, watches for a stall, so a hung fn costs one goroutine, never
// more, and nothing is left behind when it returns. The result is recorded
// in a deferred call, so that a fn that calls runtime.Goexit, which no
// recover sees, is recorded too.
func (s *Server) runCheck(p *poller, fn func() error) {
	goid := goroutineID() // before the lock: its cost is a walk of this goroutine's stack
	// start is read before the timer is armed, so that the timer runs
	// no earlier than the stall bound after it, and a check that stalled
	// has a duration of at least the bound.
	s.mu.Lock()
	p.run++
	p.inFlight, p.stalled, p.goid = true, false, goid
	start := s.sinceEpoch()
	p.started = start
	s.mu.Unlock()
	stall := s.clock.afterFunc(s.stallBound(), s.stallTimerRan)
	var err error
	returned := false
	defer func() {
		end := s.sinceEpoch()
		stall.Stop()
		if !returned {
			// Called during the Goexit, above fn's frame: the
			// stack shows where fn called it.
			err = &checkGoexit{stack: debug.Stack()}
		}
		s.mu.Lock()
		defer s.unlock()
		p.inFlight = false
		if s.poller != p {
			// Replaced while fn ran: its result feeds nothing, but a
			// panic or Goexit is a bug in the check, not to be lost.
			if attrs := bugAttrs(err); attrs != nil {
				s.log(slog.LevelError, "health: replaced data-plane check failed", attrs...)
			}
			return
		}
		if !p.stalled && end-start >= s.stallBound() {
			// It ran past the bound and returned before its timer ran:
			// a stall all the same, with no stack left to show.
			p.stalled = true
			s.checks.stalls++
			s.log(slog.LevelError, "health: data-plane check stalled", "after", s.stallBound(),
				"stack", fmt.Sprintf("the check returned after %v, before its stall was seen", end-start))
		}
		s.checks.record(err, end-start, end)
		s.setCheck(checkVerdict{err: err})
	}()
	err = callCheck(fn)
	returned = true
}

// setCheck records the check's verdict (recordCheck) and updates
// readiness. s.mu must be held.
func (s *Server) setCheck(next checkVerdict) {
	s.recordCheck(next)
	s.update()
}

// recordCheck records the check's verdict, and logs it once if it changed
// between passing and failing (never once per poll), and a recovery from
// a stall. s.mu must be held.
func (s *Server) recordCheck(next checkVerdict) {
	prev := s.check
	s.check = next
	switch {
	case next.stalled: // logged by expireStall, with its stack
	case next.err != nil && (prev.err == nil || prev.stalled || newBug(prev.err, next.err)):
		// A panic or a Goexit after failures is logged too: its
		// stack points at a bug in the check, which a plain failure
		// does not.
		attrs := bugAttrs(next.err)
		if attrs == nil {
			attrs = []any{"err", next.err}
		}
		s.log(slog.LevelError, "health: data-plane check failed", attrs...)
	case next.err == nil && (prev.err != nil || prev.stalled) && s.checkInstalled():
		s.log(slog.LevelInfo, "health: data-plane check recovered")
	}
}

// bugAttrs returns the log attributes of a check's panic or Goexit, its
// error and its stack; nil for any other error.
func bugAttrs(err error) []any {
	switch bug := err.(type) {
	case *checkPanic:
		return []any{"err", err, "stack", string(bug.stack)}
	case *checkGoexit:
		return []any{"err", err, "stack", string(bug.stack)}
	}
	return nil
}

// checkPanic is a panic recovered from the check, kept as an error so that
// it counts as a failed check rather than ending the agent's process.
type checkPanic struct {
	value any
	stack []byte
}

func (p *checkPanic) Error() string {
	return fmt.Sprintf("data-plane check panicked: %v", p.value)
}

// checkGoexit is a check that called runtime.Goexit (t.FailNow in a check
// written like a test, say), kept as an error so that it counts as a
// failed check rather than showing only as a stall.
type checkGoexit struct{ stack []byte }

func (g *checkGoexit) Error() string { return "data-plane check called runtime.Goexit" }

// newBug reports whether next is a panic or a Goexit and prev was not the
// same kind.
func newBug(prev, next error) bool {
	switch next.(type) {
	case *checkPanic:
		_, was := prev.(*checkPanic)
		return !was
	case *checkGoexit:
		_, was := prev.(*checkGoexit)
		return !was
	}
	return false
}

func callCheck(fn func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &checkPanic{value: v, stack: debug.Stack()}
		}
	}()
	return fn()
}

package health

import (
	"log/slog"
	"time"
)

// stallPeriods is the stall bound in periods: a check that has not returned
// after three periods has missed two verdicts, long enough that a slow check
// is not mistaken for a hung one.
const stallPeriods = 3

func (s *Server) stallBound() time.Duration { return stallPeriods * s.checkPeriod }

// stallTimerRan is the stall timer's callback: it publishes the verdict,
// which counts the check stalled if it is still running past the bound
// (expireStall). The timer can run just as the check returns, or after a
// later one started: the clock, not the timer, decides.
func (s *Server) stallTimerRan() {
	s.mu.Lock()
	defer s.unlock()
	s.update()
}

// expireStall counts the running check stalled once the stall bound has
// passed at now since it started, as the stall timer would (see expire),
// and logs the stall with the stack of the check's goroutine: where it is
// stuck (a netlink call that never returns, say), which the bound alone
// cannot tell. The stack is taken once s.mu is released, in one dump with
// any deadline's (stackQueue), with a watchdog's bounds, once per stall:
// a check's that stalls while a replaced one's stalled verdict stands
// too, where this one is stuck. s.mu must be held.
func (s *Server) expireStall(now time.Duration) {
	p := s.poller
	if p == nil || !p.inFlight || p.stalled || now-p.started < s.stallBound() {
		return
	}
	p.stalled = true
	s.checks.stalls++
	s.recordCheck(checkVerdict{err: s.check.err, stalled: true})
	line := s.logLater(slog.LevelError, "health: data-plane check stalled", "after", s.stallBound())
	run := p.run
	s.stacksDue = append(s.stacksDue, wantedStack{goid: p.goid, line: line, show: func(stack string) bool {
		// Only while this check is still the one stalled.
		if s.poller != p || p.run != run || !p.inFlight || !s.check.stalled {
			return false
		}
		s.check.stack = stack
		return true
	}, exited: stackCheckExited, notFound: stackCheckNotFound})
}

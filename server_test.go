package health

import "time"

// The root tests' white-box access to the Server is here, in one place:
// the helpers that wait for or read its internal state, or change it as
// its own code would, so that a change to how the Server guards that
// state changes these and not the tests.

// logWritten reports whether s has written every log line it queued.
func logWritten(s *Server) bool {
	s.logq.mu.Lock()
	defer s.logq.mu.Unlock()
	return len(s.logq.lines) == 0 && !s.logq.flushing
}

// waitLogWritten waits until s has written every line it queued, for at
// most 10 s; a test that reads the log then finds what is missing.
func waitLogWritten(s *Server) {
	for end := time.Now().Add(10 * time.Second); !logWritten(s) && time.Now().Before(end); {
		time.Sleep(100 * time.Microsecond)
	}
}

// setCheckVerdict records v as the data-plane check's verdict, as the
// poller would, so that a test can reach the rows the check decides without
// running one. With no check set, it sets a stand-in poller that runs
// nothing, because only a set check has a verdict.
func setCheckVerdict(s *Server, v checkVerdict) {
	s.mu.Lock()
	defer s.unlock()
	if s.poller == nil {
		s.poller = &poller{cancel: func() {}}
	}
	s.setCheck(v)
}

// passTime moves s's clock d forward, as if d passed at once, and runs
// the deadline timer's check as if it fired: a deadline the jump passed is
// reported now, without a real wait.
func passTime(s *Server, d time.Duration) {
	s.mu.Lock()
	s.epoch = s.epoch.Add(-d)
	gen := s.watch.gen
	s.mu.Unlock()
	s.deadlinesPassed(gen)
}

// timerArmed reports whether the deadline timer is armed.
func timerArmed(s *Server) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.watch.timer != nil
}

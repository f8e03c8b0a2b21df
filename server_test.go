package health

import "time"

// The root tests' white-box access to the Server is here, in one place:
// the helpers that wait for or read its internal state, or change it as
// its own code would, so that a change to how the Server guards that
// state changes these and not the tests. A test that touches s.mu itself
// does so only because the lock is its subject.

// locked runs f with s.mu held, for a test that reads the guarded state
// or changes it without logging. It releases the lock with s.mu.Unlock,
// not s.unlock: a read must not start a log writer, or it would hide a
// Server that queued a line and failed to start one.
func locked(s *Server, f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
}

// changing runs f with s.mu held and releases it with s.unlock, as the
// Server's own setters do, so that the lines f queued are written: for a
// test that changes the state in place of the code that would.
func changing(s *Server, f func()) {
	s.mu.Lock()
	defer s.unlock()
	f()
}

// internalState is the part of the Server's guarded state that tests wait
// for or check and no public surface shows, read in one hold of s.mu so
// that its fields agree with one another.
type internalState struct {
	check      checkVerdict
	poller     *poller       // nil when no check is set
	run        uint64        // the number of poller's latest check; 0 with none
	running    bool          // poller's latest check has started and not returned
	timerArmed bool          // the deadline timer is armed
	timerAt    time.Duration // the deadline it was last armed for, since epoch
	watchGen   uint64        // watchState.gen: it moves each time the timer is armed or stopped
	watched    []*Watchdog   // a copy of watchState.list
}

// internals reads s's internalState, so that a test that checks the
// Server's guarded fields takes no lock by hand. A field of an object the
// test already holds (a poller's run) is read with locked instead.
func internals(s *Server) internalState {
	var st internalState
	locked(s, func() {
		st = internalState{
			check:      s.check,
			poller:     s.poller,
			timerArmed: s.watch.timer != nil,
			timerAt:    s.watch.timerAt,
			watchGen:   s.watch.gen,
			watched:    append([]*Watchdog(nil), s.watch.list...),
		}
		if s.poller != nil {
			st.run, st.running = s.poller.run, s.poller.inFlight
		}
	})
	return st
}

// logBacklog reads, under the log queue's own lock, how many lines s has
// queued and not yet handed to its writer, and whether a goroutine is
// writing them: what a test needs to know the log has caught up.
func logBacklog(s *Server) (queued int, writing bool) {
	s.logq.mu.Lock()
	defer s.logq.mu.Unlock()
	return len(s.logq.lines), s.logq.flushing
}

// logWritten reports whether s has written every log line it queued. A
// deadline's line that waits for its stack keeps the writer busy, so it
// counts as not written until it is.
func logWritten(s *Server) bool {
	queued, writing := logBacklog(s)
	return queued == 0 && !writing
}

// waitLogWritten waits until s has written every line it queued, for at
// most 10 s; a test that reads the log then finds what is missing. It is
// how the tests wait for the Server to settle: a line decided in
// the timer's or the poller's goroutine is written after the state it
// reports is published.
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
	changing(s, func() {
		if s.poller == nil {
			s.poller = &poller{cancel: func() {}}
		}
		s.setCheck(v)
	})
}

// advanceAside runs clk.advance in a goroutine of its own, and returns a
// channel closed once it has returned: a timer that took a deadline's
// stack itself, rather than leave it to a goroutine of its own, would
// block in a test's dump until the test releases it, and must fail the
// test's wait, not hang it.
func advanceAside(clk *fakeClock, d time.Duration) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		clk.advance(d)
	}()
	return done
}

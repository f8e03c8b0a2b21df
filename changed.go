package health

// Changed returns a channel that is closed at the next change of the set of
// unmet conditions (Status().Unmet), so that the agent can act the moment
// readiness moves rather than poll it: remove the node's startup taint on
// the first ready, say. A change made after Changed returns is never
// missed, so this loop wakes after every change and always ends on the
// current state; changes faster than it reads coalesce:
//
//	for {
//		ch := srv.Changed()
//		err := srv.Ready()
//		// act on err
//		<-ch // or a select with the agent's ctx
//	}
//
// A change of Ready's detail alone (another subsystem's name, another
// check error) is no change of the set. One wake comes without a change:
// when a deadline's stack reaches Status, a moment after the deadline's
// change (WatchdogStatus.Stack), so that a loop that shows Status on each
// wake shows where the loop is stuck; a loop like the one above takes it
// in its stride. Every caller between two changes
// gets the same channel; probes never touch it, so it never slows one.
func (s *Server) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.changed == nil {
		s.changed = make(chan struct{})
	}
	return s.changed
}

// announceChange wakes Changed's callers. It is called after the new
// verdict is stored, so that a woken caller reads it. The channel is made
// only when someone asks, so that a Server nobody watches allocates
// nothing per change. s.mu must be held.
func (s *Server) announceChange() {
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
}

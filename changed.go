package health

// Changed returns a channel closed at the next change of Status().Unmet
// (not of Ready's detail), or when a stack reaches Status. A change after
// the call is never missed, so a loop of ch := s.Changed(); act on
// s.Ready(); <-ch ends on the current state. Probes never touch it.
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

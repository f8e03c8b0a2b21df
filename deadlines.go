package health

import (
	"log/slog"
	"math"
	"runtime"
	"time"
)

// watchDeadlines arms the timer at the earliest deadline of the watchdogs
// that are neither late nor disabled, or stops it when there is none. A
// timer armed earlier than that deadline is left alone: it finds that
// Beats moved the deadline on and arms itself again, so the timer wakes
// once per timeout of a beating loop, however often it beats. s.mu must
// be held.
func (s *Server) watchDeadlines() {
	var next time.Duration
	found := false
	for _, w := range s.watch.list {
		if d := w.deadline(); w.timeout > 0 && !w.late && (!found || d < next) {
			next, found = d, true
		}
	}
	if found && s.watch.timer != nil && s.watch.timerAt <= next {
		return
	}
	if s.watch.timer != nil {
		s.watch.timer.Stop()
		s.watch.timer = nil
		s.watch.gen++
	}
	if !found {
		return
	}
	s.watch.gen++
	gen := s.watch.gen
	s.watch.timerAt = next
	s.watch.timer = time.AfterFunc(next-s.sinceEpoch(), func() { s.deadlinesPassed(gen) })
}

// passing is a watchdog whose deadline the timer found passed, and the
// goroutine that last made it met, whose stack its ERROR line carries.
type passing struct {
	w    *Watchdog
	goid uint64
}

// deadlinesPassed is the timer's callback: it marks late every watchdog
// whose deadline has passed, logs each once with the stack of the
// goroutine that last made it met, and arms the timer at the next
// deadline.
//
// The stacks are taken between two holds of the lock, never under it: a
// dump of every goroutine stops the world for milliseconds when there are
// thousands, and a Status, a setter or an overdue Beat must not wait that
// long on top. So the first hold finds the watchdogs past their deadline,
// the dump runs, and the second marks those still past it (a Beat may
// have come meanwhile), each with its stack, then logs, in the order of
// the changes: the ERROR line before the readiness change it causes. A
// deadline that passes during the dump is left to the timer, armed again
// at once: every ERROR line has its stack, and each deadline costs one
// dump.
func (s *Server) deadlinesPassed(gen uint64) {
	s.mu.Lock()
	if gen != s.watch.gen {
		s.mu.Unlock()
		return // stopped or replaced after it fired
	}
	var due []passing
	var ids []uint64
	now := s.sinceEpoch()
	for _, w := range s.watch.list {
		if !w.late && w.timeout > 0 && now >= w.deadline() {
			due = append(due, passing{w, w.goid})
			ids = append(ids, w.goid)
		}
	}
	s.mu.Unlock()

	var stacks map[uint64]string
	if len(due) > 0 {
		stacks = stacksOf(s.stackDump, maxDump, runtime.NumGoroutine(), ids)
	}

	s.mu.Lock()
	defer s.unlock()
	if gen == s.watch.gen {
		s.watch.timer = nil // this one has fired; armed again below
	}
	now = s.sinceEpoch()
	changed := false
	for _, p := range due {
		w := p.w
		if w.stopped || w.late || w.goid != p.goid {
			continue // stopped, reported, or beaten back and made met by another goroutine meanwhile
		}
		if now < w.deadline() {
			continue // beaten during the dump: met, and left so, so that no met Beat waits for the lock
		}
		// met is cleared before last is read again, as a Beat stores
		// last before it reads met: either this read sees the Beat's
		// store, and the watchdog stays met, or the Beat sees met
		// cleared and waits for the lock to restore it.
		wasMet := w.met.Swap(false)
		if now < w.deadline() {
			w.met.Store(wasMet)
			continue
		}
		w.overdue = true
		w.late = true
		w.timeouts++
		w.stack = stacks[p.goid]
		changed = true
		s.log(slog.LevelError, "health: subsystem unresponsive", "subsystem", w.name, "timeout", w.timeout, "stack", w.stack)
	}
	s.watchDeadlines()
	if changed {
		s.update()
	}
}

// deadline is the last Beat plus the timeout, since epoch. A timeout too
// long to add (math.MaxInt64, for "never") saturates rather than wrapping
// to a deadline in the past.
func (w *Watchdog) deadline() time.Duration {
	last := time.Duration(w.last.Load())
	if w.timeout > math.MaxInt64-last {
		return math.MaxInt64
	}
	return last + w.timeout
}

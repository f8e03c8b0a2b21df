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

// passed is a watchdog whose deadline the timer found passed, the
// goroutine whose stack its ERROR line is to carry, and the line, queued
// to wait for that stack.
type passed struct {
	w        *Watchdog
	goid     uint64
	timeouts uint64 // w.timeouts at this deadline: its stack is Status's while no later one has passed
	line     *laterLine
}

// deadlinesPassed is the timer's callback: it marks late every watchdog
// whose deadline has passed, publishes the verdict, logs each once with
// the stack of the goroutine that last made it met, and arms the timer at
// the next deadline.
//
// Readiness never waits for a stack. A dump of every goroutine stops the
// world for as long as the runtime takes to print them, seconds with
// thousands of deep ones on a loaded node, which would carry the verdict
// past the second after the deadline that Watch promises, and a Status, a
// setter or an overdue Beat must not wait that long either. So one hold of
// the lock marks the watchdogs late, publishes, and queues each ERROR line
// in its place, before the readiness line it causes; the dump runs after
// it, and then completes the lines, which the log's goroutine writes in
// order. A Beat during the dump recovers at once, and its lines follow the
// ERROR line in the log; Status shows a stack only once it is taken. One
// dump runs at a time.
func (s *Server) deadlinesPassed(gen uint64) {
	s.mu.Lock()
	if gen != s.watch.gen {
		s.mu.Unlock()
		return // stopped or replaced after it fired
	}
	s.watch.timer = nil // this one has fired; armed again below
	var due []passed
	var ids []uint64
	now := s.sinceEpoch()
	for _, w := range s.watch.list {
		if w.late || w.timeout == 0 || now < w.deadline() {
			continue
		}
		// Clear met, then read last again: see Watchdog.met.
		wasMet := w.met.Swap(false)
		if now < w.deadline() {
			w.met.Store(wasMet)
			continue
		}
		w.overdue = true
		w.late = true
		w.timeouts++
		line := s.logLater(slog.LevelError, "health: subsystem unresponsive", "subsystem", w.name, "timeout", w.timeout)
		due = append(due, passed{w, w.goid, w.timeouts, line})
		ids = append(ids, w.goid)
	}
	s.watchDeadlines()
	s.update()
	s.unlock()
	if len(due) == 0 {
		return
	}

	s.dumping.Lock()
	stacks := stacksOf(s.stackDump, maxDump, runtime.NumGoroutine(), ids)
	s.dumping.Unlock()

	s.mu.Lock()
	for _, p := range due {
		if p.w.late && p.w.timeouts == p.timeouts {
			p.w.stack = stacks[p.goid]
		}
	}
	s.mu.Unlock()
	for _, p := range due {
		p.line.complete("stack", stacks[p.goid])
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

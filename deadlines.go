package health

import (
	"log/slog"
	"math"
	"runtime"
	"sync"
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
	s.watch.timer = s.clock.afterFunc(next-s.sinceEpoch(), func() { s.deadlinesPassed(gen) })
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
// world for as long as the runtime takes to print them: up to
// maxDumpPause as foreseen, longer when the foresight is wrong (a first
// dump, a node throttled since), which would carry the verdict past the
// second after the deadline that Watch promises; and a Status, a setter
// or an overdue Beat must not wait that long either. So one hold of
// the lock marks the watchdogs late, publishes, and queues each ERROR line
// in its place, before the readiness line it causes; the dump runs after
// it, and then completes the lines, which the log's goroutine writes in
// order. A Beat during the dump recovers at once, and its lines follow the
// ERROR line in the log; Status shows a stack only once it is taken (see
// completeStacks). One dump runs at a time (see stackQueue).
func (s *Server) deadlinesPassed(gen uint64) {
	s.mu.Lock()
	if gen != s.watch.gen {
		s.mu.Unlock()
		return // stopped or replaced after it fired
	}
	s.watch.timer = nil // this one has fired; armed again below
	var due []passed
	now := s.sinceEpoch()
	for _, w := range s.watch.list {
		if w.late || w.timeout == 0 || now < w.deadline() {
			continue
		}
		// Clear met, then read last again: see Watchdog.met. It is read
		// once, so that a Beat after this read cannot make the deadline
		// one that has not passed.
		wasMet := w.met.Swap(false)
		last := w.lastOnce()
		deadline := deadlineFrom(last, w.timeout)
		if now < deadline {
			w.met.Store(wasMet)
			continue
		}
		w.overdue = true
		w.late = true
		w.lateFrom, w.lateAt = last, max(deadline, w.retunedAt)
		w.timeouts++
		line := s.logLater(slog.LevelError, "health: subsystem unresponsive", "subsystem", w.name, "timeout", w.timeout)
		if w.unknownBeater {
			w.stack = stackBeatWhileDisabled
			line.complete("stack", w.stack)
			continue
		}
		due = append(due, passed{w, w.goid, w.timeouts, line})
	}
	s.watchDeadlines()
	s.update()
	s.unlock()
	if len(due) > 0 {
		s.takeStacks(due)
	}
}

// stackQueue holds the deadlines whose stacks are still to be taken, so
// that one goroutine dumps at a time, and one dump serves every deadline
// that passed while the one before it ran: a pool of hung workers whose
// deadlines fall close together costs two stops of the world, not one a
// worker.
type stackQueue struct {
	mu      sync.Mutex
	pending []passed
	dumping bool   // a goroutine is taking stacks for pending
	dumper  dumper // the dumping goroutine's alone
}

// takeStacks has the stacks of due taken and their lines completed: by
// this goroutine, or by the one already dumping, once its dump is done.
func (s *Server) takeStacks(due []passed) {
	q := &s.stackq
	q.mu.Lock()
	q.pending = append(q.pending, due...)
	if q.dumping {
		q.mu.Unlock()
		return
	}
	q.dumping = true
	for len(q.pending) > 0 {
		batch := q.pending
		q.pending = nil
		q.mu.Unlock()
		s.completeStacks(batch)
		q.mu.Lock()
	}
	q.dumping = false
	q.mu.Unlock()
}

// completeStacks takes the stacks of batch in one dump, gives each to its
// watchdog's Status while that deadline is its latest and it is still
// late, and completes the ERROR lines. A stack that reaches Status wakes
// Changed, so that a loop that shows Status on each wake shows it.
func (s *Server) completeStacks(batch []passed) {
	ids := make([]uint64, len(batch))
	for i, p := range batch {
		ids[i] = p.goid
	}
	stacks := s.stackq.dumper.stacksOf(maxDump, runtime.NumGoroutine(), ids)
	s.mu.Lock()
	shown := false
	for _, p := range batch {
		if p.w.late && !p.w.stopped && p.w.timeouts == p.timeouts {
			p.w.stack = stacks[p.goid]
			shown = true
		}
	}
	if shown {
		s.announceChange()
	}
	s.mu.Unlock()
	for _, p := range batch {
		p.line.complete("stack", stacks[p.goid])
	}
}

// deadline is the last Beat plus the timeout, since epoch. A timeout too
// long to add (math.MaxInt64, for "never") saturates rather than wrapping
// to a deadline in the past.
func (w *Watchdog) deadline() time.Duration { return deadlineFrom(w.lastOnce(), w.timeout) }

// lastOnce reads the time of the last Beat, since epoch.
func (w *Watchdog) lastOnce() time.Duration { return time.Duration(w.last.Load()) }

// deadlineFrom is the deadline of a Beat at last with timeout.
func deadlineFrom(last, timeout time.Duration) time.Duration {
	if timeout > math.MaxInt64-last {
		return math.MaxInt64
	}
	return last + timeout
}

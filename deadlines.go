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

// wantedStack is a stack an ERROR line waits for: the goroutine's, the
// line, queued in its place, show, which gives the stack to Status while
// what the line reports still holds and reports whether it did (called
// with s.mu held), and the texts for a goroutine the dump did not hold.
type wantedStack struct {
	goid             uint64
	line             *laterLine
	show             func(stack string) bool
	exited, notFound string
}

// text is the stack w's line and Status carry, from a dump that took
// stacks and was cut or not (stacksOf).
func (w wantedStack) text(stacks map[uint64]string, cut bool) string {
	switch s, ok := stacks[w.goid]; {
	case ok:
		return s
	case cut:
		return w.notFound
	}
	return w.exited
}

// expire does, for every deadline and stall bound that the clock has
// passed and no timer has yet reported, what that timer would have done:
// it marks the watchdog late or the check stalled, counts it, and queues
// its ERROR line, whose stack is taken once s.mu is released (unlock).
// update calls it before it computes the verdict, so that whatever input
// publishes (a setter, a Beat, a Stop, SetWatchdogs, a check's return)
// publishes what the clock says, not what the timers have caught up with:
// a timer runs a moment after its time, later on a loaded node, and an
// input in that moment would otherwise publish as met a watchdog whose
// deadline has passed. The timers only make sure that a publication
// happens when no input comes. s.mu must be held.
func (s *Server) expire() {
	now := s.sinceEpoch()
	if s.expireWatchdogs(now) {
		s.watchDeadlines()
	}
	s.expireStall(now)
}

// expireWatchdogs marks late every watchdog whose deadline had passed at
// now, and reports whether it marked one. s.mu must be held.
func (s *Server) expireWatchdogs(now time.Duration) (marked bool) {
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
		marked = true
		w.overdue = true
		w.late = true
		w.lateFrom = last
		w.timeouts++
		line := s.logLater(slog.LevelError, "health: subsystem unresponsive", "subsystem", w.name, "timeout", w.timeout)
		if known := knownStack(w); known != "" {
			w.stack = known
			line.complete("stack", known)
			continue
		}
		timeouts := w.timeouts
		s.stacksDue = append(s.stacksDue, wantedStack{goid: w.goid, line: line, show: func(stack string) bool {
			// Only while this deadline is its latest and it is late.
			if !w.late || w.stopped || w.timeouts != timeouts {
				return false
			}
			w.stack = stack
			return true
		}, exited: stackExited, notFound: stackNotFound})
	}
	return marked
}

// knownStack is the text of a deadline's stack known without a dump:
// when no goroutine is known to be the loop's; else "".
func knownStack(w *Watchdog) string {
	switch {
	case w.unknownBeater:
		return stackBeatWhileDisabled
	case w.goid == 0:
		return stackNoBeat
	}
	return ""
}

// deadlinesPassed is the deadline timer's callback: it publishes the
// verdict, which counts every deadline passed (expire), and arms the timer
// at the next deadline.
//
// Readiness never waits for a stack. A dump of every goroutine stops the
// world for as long as the runtime takes to print them: up to
// maxDumpPause as foreseen, longer when the foresight is wrong (a first
// dump, a node throttled since), which would carry the verdict past the
// second after the deadline that Watch promises; and a Status, a setter
// or a Beat must not wait that long either. So one hold of the lock marks
// the watchdogs late, publishes, and queues each ERROR line in its place,
// before the readiness line it causes; the dump runs after it, in a
// goroutine of its own, and then completes the lines, which the log's
// goroutine writes in order. A Beat during the dump recovers at once, and
// its lines follow the ERROR line in the log; Status shows a stack only
// once it is taken (see completeStacks). One dump runs at a time (see
// stackQueue).
func (s *Server) deadlinesPassed(gen uint64) {
	s.mu.Lock()
	defer s.unlock()
	if gen != s.watch.gen {
		return // stopped or replaced after it fired
	}
	s.watch.timer = nil // this one has fired; armed again below
	s.update()
	s.watchDeadlines()
}

// stackQueue holds the stacks still to be taken, so that one goroutine
// dumps at a time, and one dump serves every stack wanted while the one
// before it ran: a pool of hung workers whose deadlines fall close
// together costs two stops of the world, not one a worker.
type stackQueue struct {
	mu      sync.Mutex
	pending []wantedStack
	dumping bool   // a goroutine is taking stacks for pending
	dumper  dumper // the dumping goroutine's alone
}

// takeStacks has the stacks of due taken and their lines completed: by
// this goroutine, or by the one already dumping, once its dump is done.
func (s *Server) takeStacks(due []wantedStack) {
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

// completeStacks takes the stacks of batch in one dump, gives each to
// Status while what its line reports still holds, and completes the
// ERROR lines. A stack that reaches Status wakes Changed, so that a loop
// that shows Status on each wake shows it.
func (s *Server) completeStacks(batch []wantedStack) {
	ids := make([]uint64, len(batch))
	for i, w := range batch {
		ids[i] = w.goid
	}
	stacks, cut := s.stackq.dumper.stacksOf(maxDump, runtime.NumGoroutine(), ids)
	s.mu.Lock()
	shown := false
	for _, w := range batch {
		if w.show(w.text(stacks, cut)) {
			shown = true
		}
	}
	if shown {
		s.announceChange()
	}
	s.mu.Unlock()
	for _, w := range batch {
		w.line.complete("stack", w.text(stacks, cut))
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

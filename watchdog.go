package health

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// A Watchdog watches one of the agent's loops for readiness: the loop calls
// Beat on every turn, and a loop that stops beating for longer than its
// timeout, because it hangs on a watch that never returns or a lock that is
// never released, takes the node out of service (readiness row 9, "subsystem
// unresponsive") until it beats again. Liveness stays 200: a hung loop is a
// reason to stop sending work to the node, not to restart the agent, whose
// restart tears the data plane down.
//
// When a deadline passes, its ERROR line ("health: subsystem
// unresponsive", attribute stack) and Status say where the loop is stuck:
// the stack of the goroutine whose Beat last made the watchdog met (its
// first Beat, or the first after a deadline), alone, as the runtime prints
// it, header and wait reason included ("goroutine 41 [sync.Mutex.Lock]:";
// the runtime adds ", 12 minutes" once the wait passes a minute and a
// garbage collection has seen it), at most 16 KiB. A loop that returned
// without Stop shows "the goroutine that last beat has exited". Taking it
// stops the world while the runtime prints every goroutine, once per
// deadline (about 0.2 s with 10,000 goroutines, docs/performance.md; not
// taken when the last dump's cost foresees more than half a second);
// readiness reports the deadline without waiting for it.
//
// That goroutine is the loop's when the loop beats from itself, as it
// should. When Beats come from elsewhere the stack is another's: a
// goroutine that beats on the loop's behalf (a ticker beside it, which
// never hangs, so such a watchdog misses the hang itself), a pool whose
// workers share one watchdog (whichever worker beat first after the last
// deadline, perhaps an idle one), a loop whose turn hands work to another
// goroutine (the stack shows the wait, not the worker). The goroutine is
// that of the Beat that made the watchdog met, not of the latest Beat,
// because a met Beat records nothing, so that it stays free of locks and
// allocations.
//
// Create one with [Server.Watch]. Its methods are safe for concurrent use.
type Watchdog struct {
	s       *Server
	name    string
	timeout time.Duration // in force: Config.Watchdogs's when it has the name; 0 disabled
	total   int           // its name's index in watchState.totals

	// last is the monotonic time of the last Beat, in nanoseconds since
	// s.epoch; before the first Beat, the time of Watch, so that the
	// first deadline counts from there. It only moves forward.
	last  atomic.Int64
	beats atomic.Uint64
	// met tells Beat that it needs no lock: it is true only while the
	// published verdict counts the watchdog met. It is set after that
	// verdict is stored and cleared before an unmet one is, always under
	// s.mu, so that a Beat that finds it true may return at once, and a
	// Beat that finds it false takes the lock and finds the truth.
	met atomic.Bool

	// Guarded by s.mu.
	overdue  bool   // unmet: no Beat yet, or none within the timeout
	late     bool   // a deadline passed and was reported; no Beat since
	timeouts uint64 // deadlines passed
	stopped  bool
	// goid is the goroutine whose Beat last made the watchdog met (its
	// first Beat, or the first after a deadline); 0 before the first.
	// Its stack is the one a deadline shows: a loop beats from its own
	// goroutine, so that is where it hangs.
	goid  uint64
	stack string // while late: what the deadline's line carried as stack
}

// WatchdogStatus describes a watchdog (Server.Watch) for Status.
type WatchdogStatus struct {
	Name string
	// Timeout is the timeout in force: the one Config.Watchdogs gives
	// the name, or else the code's; 0 when the config disables it.
	Timeout time.Duration
	// Beats counts the Beats since Watch: a count that stops growing
	// shows a hung loop before its timeout does.
	Beats uint64
	// LastBeat is when the watchdog last beat; zero before the first. Its
	// wall reading is the wall clock at Status less the time since the
	// Beat, so it stays right if the wall clock is stepped in between (it
	// may move by the clock's slew from one Status to the next); its
	// monotonic reading makes time.Since(LastBeat) exact.
	LastBeat time.Time
	// Overdue is whether it is unmet now: no Beat yet, or none within
	// Timeout.
	Overdue bool
	// Timeouts counts the times it ran past its timeout; its first
	// deadline counts from Watch. A count that grows while Overdue is
	// false is a loop that hangs for a while and comes back.
	Timeouts uint64
	// Stack is, while Overdue after a deadline, what that deadline's
	// ERROR line carried as its stack: where the loop is stuck (see
	// Watchdog); empty otherwise, once it is met again, and in the moment
	// after the deadline while the stack is taken, which readiness does
	// not wait for.
	Stack string
}

// WatchdogTotals counts the Beats and Timeouts of every watchdog watched
// under one name since NewServer, the stopped ones included (Status). It
// is there for metrics: Status.Watchdogs lists only the watchdogs watched
// now, so a sum over it by name falls when one stops (a worker of a pool
// ends on purpose), and a metrics system reads a counter that falls as a
// reset, which fires an increase() alert on timeouts that never happened.
// These totals never fall.
type WatchdogTotals struct {
	Name     string
	Beats    uint64
	Timeouts uint64
}

// watchState is the Server's watchdogs and the one timer that watches
// their deadlines. It is guarded by Server.mu.
type watchState struct {
	list []*Watchdog // watched (not stopped), in Watch order
	// totals holds, for every name ever watched, in the order of its
	// first Watch, the Beats and Timeouts of its stopped watchdogs;
	// Status adds those of the watched ones. names indexes it.
	totals []WatchdogTotals
	names  map[string]int
	// timer fires at the earliest deadline of the watchdogs not yet
	// late; it is nil when none needs watching, so that nothing of the
	// watchdogs is left once the last one is stopped. A firing whose
	// generation is not gen's was stopped or replaced after it fired,
	// and does nothing.
	timer   *time.Timer
	timerAt time.Duration // the deadline timer is armed for, since epoch
	gen     uint64
}

// Watch returns a watchdog for one of the agent's loops, named name in the
// log, in Ready's error and in Status, never in a probe's body. Until its
// first Beat the node is not ready: readiness needs evidence, and a loop
// that has not turned has shown none. After a Beat it is met until
// timeout passes without another; then readiness reports "subsystem
// unresponsive" within a second of that deadline, never before it. So
// Watch each loop before it starts, at bring-up, and choose a timeout well
// above the longest turn the loop can take when it is healthy.
//
// A timeout is meant in seconds to minutes: a second at the least, and
// several times the loop's longest healthy turn and its idle tick. Every
// deadline passed is a real event, logged at error level, taken out of
// service and logged back, with two wakes of Changed; a timeout near a
// turn's length (milliseconds) would make each slow turn all of that, and
// flood the log with lines that mean nothing.
//
// A loop that waits for events must beat on an idle tick too (a time.Ticker
// of a fraction of timeout in its select), or a quiet hour would look like
// a hang. Deadlines are watched by one timer per Server, armed at the
// earliest deadline, never by probes.
//
// Any number of watchdogs may be watched, under any names, repeated ones
// too. Each name keeps its totals in Status.WatchdogTotals for the
// Server's life, so name loops by kind ("reconcile"), not by peer. A
// non-positive timeout panics, naming the watchdog, as time.NewTicker
// does: it is a programming error, not input.
//
// The operator has the last word: a name in Config.Watchdogs gets the
// config's timeout instead of timeout, logged once at INFO ("health:
// watchdog timeout set by config"), and a timeout of 0 there disables the
// watchdog: it never counts as unmet, not even before its first Beat, and
// has no deadline, while Beat, Stop and Status work as ever (Status gives
// it Timeout 0). A negative timeout there, which Validate refuses, is
// ignored with an ERROR line, and the code's timeout kept.
func (s *Server) Watch(name string, timeout time.Duration) *Watchdog {
	if timeout <= 0 {
		panic(fmt.Sprintf("health: Watch %q: timeout %v is not positive", name, timeout))
	}
	s.mu.Lock()
	defer s.unlock()
	if d, ok := s.cfg.Watchdogs[name]; ok {
		if d < 0 {
			s.log(slog.LevelError, "health: watchdog timeout set by config is negative; the code's is kept",
				"subsystem", name, "config", time.Duration(d), "timeout", timeout)
		} else {
			timeout = time.Duration(d)
			s.log(slog.LevelInfo, "health: watchdog timeout set by config", "subsystem", name, "timeout", timeout)
		}
	}
	w := &Watchdog{s: s, name: name, timeout: timeout, overdue: timeout > 0}
	w.met.Store(!w.overdue) // a disabled watchdog is met for good: its Beat never locks
	w.total = s.watch.totalOf(name)
	w.last.Store(int64(s.sinceEpoch()))
	s.watch.list = append(s.watch.list, w)
	s.watchDeadlines()
	s.update()
	return w
}

// Beat tells readiness that the loop has turned. On a watchdog that is met,
// it takes no lock and allocates nothing, so a loop can call it on every
// turn. On one that is overdue, readiness recovers before Beat returns.
// After Stop it does nothing.
func (w *Watchdog) Beat() {
	now := int64(w.s.sinceEpoch())
	// Only forward: a Beat that read the clock before another one's
	// store must not move the deadline back.
	for {
		last := w.last.Load()
		if now <= last || w.last.CompareAndSwap(last, now) {
			break
		}
	}
	w.beats.Add(1)
	// The store of last above comes before this load, and the deadline
	// timer clears met before it reads last (deadlinesPassed): so either
	// this Beat sees met cleared and recovers under the lock, or the
	// timer sees the new last and keeps the watchdog met. Go's atomics
	// are sequentially consistent, so neither can miss the other.
	if !w.met.Load() {
		w.s.beatOverdue(w)
	}
}

// beatOverdue makes an overdue watchdog met again after a Beat, and
// publishes the verdict before Beat returns. It records the beating
// goroutine, whose stack the next deadline shows; the id is read before
// the lock, so that its cost (a walk of this goroutine's stack) is not
// the lock's.
func (s *Server) beatOverdue(w *Watchdog) {
	goid := goroutineID()
	s.mu.Lock()
	defer s.unlock()
	if w.stopped || !w.overdue {
		return // stopped, or another Beat got here first and published
	}
	w.overdue = false
	w.goid = goid
	w.stack = ""
	if w.late {
		w.late = false
		s.log(slog.LevelInfo, "health: subsystem responsive again", "subsystem", w.name)
	}
	s.watchDeadlines()
	s.update()
	w.met.Store(true)
}

// Stop stops watching: the watchdog no longer counts for readiness nor
// shows in Status, and a later Beat does nothing. Call it when the loop
// ends on purpose; a loop that ends by accident is SetSubsystemStopped's to
// report. Stop twice is fine. Once every watchdog is stopped, nothing of
// them is left running.
func (w *Watchdog) Stop() {
	s := w.s
	s.mu.Lock()
	defer s.unlock()
	if w.stopped {
		return
	}
	w.stopped = true
	// Its counts stay in its name's totals. A Beat that counts after
	// this load came after Stop, and does nothing.
	s.watch.totals[w.total].Beats += w.beats.Load()
	s.watch.totals[w.total].Timeouts += w.timeouts
	for i, x := range s.watch.list {
		if x == w {
			s.watch.list = append(s.watch.list[:i:i], s.watch.list[i+1:]...)
			break
		}
	}
	s.watchDeadlines()
	s.update()
	w.met.Store(true) // it counts for nothing now: a later Beat need not lock
}

// sinceEpoch reads the monotonic clock. It does not allocate.
func (s *Server) sinceEpoch() time.Duration { return time.Since(s.epoch) }

// unresponsive reports whether a watchdog is overdue. s.mu must be held.
func (s *Server) unresponsive() bool {
	for _, w := range s.watch.list {
		if w.overdue {
			return true
		}
	}
	return false
}

// unresponsiveDetail is Ready's error for row 9: every overdue watchdog,
// quoted, with its timeout. s.mu must be held.
func (s *Server) unresponsiveDetail() error {
	var names []string
	for _, w := range s.watch.list {
		switch {
		case !w.overdue:
		case w.beats.Load() == 0:
			names = append(names, fmt.Sprintf("%q (no beat yet, timeout %v)", w.name, w.timeout))
		default:
			names = append(names, fmt.Sprintf("%q (no beat within %v)", w.name, w.timeout))
		}
	}
	return fmt.Errorf("%w: %s", ErrSubsystemUnresponsive, strings.Join(names, ", "))
}

// totalOf returns the index of name's totals, making them at its first
// Watch.
func (ws *watchState) totalOf(name string) int {
	i, ok := ws.names[name]
	if !ok {
		if ws.names == nil {
			ws.names = make(map[string]int)
		}
		i = len(ws.totals)
		ws.names[name] = i
		ws.totals = append(ws.totals, WatchdogTotals{Name: name})
	}
	return i
}

// watchdogStatus returns the Status of every watched watchdog, in Watch
// order, at the clock reading now, and the totals of every name ever
// watched, which add the same counts to those of the stopped watchdogs.
// s.mu must be held.
func (s *Server) watchdogStatus(now clockReading) ([]WatchdogStatus, []WatchdogTotals) {
	if len(s.watch.totals) == 0 {
		return nil, nil
	}
	totals := slices.Clone(s.watch.totals)
	var st []WatchdogStatus
	if len(s.watch.list) > 0 {
		st = make([]WatchdogStatus, len(s.watch.list))
	}
	for i, w := range s.watch.list {
		// beats before last: a Beat stores last before it counts, so
		// a count above zero has its time stored.
		st[i] = WatchdogStatus{Name: w.name, Timeout: w.timeout, Beats: w.beats.Load(), Overdue: w.overdue, Timeouts: w.timeouts, Stack: w.stack}
		if st[i].Beats > 0 {
			st[i].LastBeat = now.at(time.Duration(w.last.Load()))
		}
		totals[w.total].Beats += st[i].Beats
		totals[w.total].Timeouts += st[i].Timeouts
	}
	return st, totals
}

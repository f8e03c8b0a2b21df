package health

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// A Watchdog, made by Server.Watch, watches one of the agent's loops, which
// calls Beat every turn. A deadline passed logs ERROR with the stack of the
// goroutine whose Beat last made it met: so beat from the loop's own
// goroutine, where it hangs. Its methods are safe for concurrent use.
type Watchdog struct {
	s       *Server
	name    string
	code    time.Duration // Watch's
	timeout time.Duration // in force: the overrides' when they have the name; 0 disabled
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
	//
	// Why a Beat may trust it without the lock: a Beat stores last, then
	// loads met; a publication that finds the deadline passed clears met,
	// then loads last again (expireWatchdogs). Go's atomics are
	// sequentially consistent, so one of the two sees the other: either
	// the publication sees the new last and restores met, or the Beat
	// sees met cleared and recovers under the lock. Neither can miss the
	// other. A retune that switches a watchdog on clears met, then loads
	// beats, for the same reason.
	met atomic.Bool

	// Guarded by s.mu.
	overdue  bool   // unmet: no Beat yet, or none within the timeout
	late     bool   // a deadline passed and was reported; no Beat since
	timeouts uint64 // deadlines passed
	stopped  bool
	// goid is the goroutine whose Beat last made the watchdog met (its
	// first Beat, or the first after a deadline); 0 before the first.
	// Its stack is the one a deadline shows. When Beats come from elsewhere
	// the stack is another's: a ticker beating on the loop's behalf (which
	// never hangs, so its watchdog misses the hang itself), a pool sharing
	// one watchdog (whichever worker beat first, perhaps an idle one), a
	// turn that hands work to another goroutine (the stack shows the wait).
	// It is not the latest Beat's, because a met Beat records nothing, so
	// that it stays free of locks and allocations.
	goid  uint64
	stack string // while late: what the deadline's line carried as stack
	// lateFrom is, while late, the last Beat the passed deadline counted
	// from (Watch's time before the first), since s.epoch: the recovery
	// line counts how long the loop went without a Beat from there, not
	// from the deadline or a retune, so that its after is the hang's
	// length whatever timeout was in force.
	lateFrom time.Duration
	// unknownBeater: the loop beat while the watchdog was disabled, when
	// a Beat records no goroutine, and has not beaten since it was
	// switched on (retune).
	unknownBeater bool
}

// WatchdogStatus describes a watchdog for Status.
type WatchdogStatus struct {
	Name     string
	Timeout  time.Duration // in force: the overrides' for the name, or the code's; 0 disabled
	Beats    uint64        // Beats since Watch
	LastBeat time.Time     // zero before the first Beat
	Overdue  bool          // unmet: no Beat yet, or none within Timeout
	Timeouts uint64        // deadlines passed; the first counts from Watch
	Stack    string        // while Overdue after a deadline, its ERROR line's stack once taken; else empty
}

// WatchdogTotals count one name's Beats and Timeouts: they never fall.
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
	timer   timer
	timerAt time.Duration // the deadline timer is armed for, since epoch
	gen     uint64
}

// Watch returns a watchdog for a loop, named name in the log, Ready and
// Status (names may repeat; name loops by kind, "reconcile", not by peer:
// each name's totals last the Server's life). It is unmet until the first
// Beat, then met until timeout passes without one, which a timer, never a
// probe, reports within a second, never before. Watch at bring-up, with a
// timeout well above the loop's longest healthy turn. A non-positive
// timeout panics, naming the watchdog.
//
// A name in the overrides in force (Config.Watchdogs, then SetWatchdogs's)
// takes their timeout instead, logged at INFO; 0 there disables the
// watchdog (never unmet), a negative one is ignored with an ERROR line.
func (s *Server) Watch(name string, timeout time.Duration) *Watchdog {
	if timeout <= 0 {
		panic(fmt.Sprintf("health: Watch %q: timeout %v is not positive", name, timeout))
	}
	s.mu.Lock()
	defer s.unlock()
	code := timeout
	timeout = s.timeoutFor(name, code)
	if d, ok := s.overrides[name]; ok && d >= 0 {
		s.log(slog.LevelInfo, "health: watchdog timeout set by config", "subsystem", name, "timeout", timeout)
	}
	w := &Watchdog{s: s, name: name, code: code, timeout: timeout, overdue: timeout > 0}
	w.met.Store(!w.overdue) // a disabled watchdog is met for good: its Beat never locks
	w.total = s.watch.totalOf(name)
	w.last.Store(int64(s.sinceEpoch()))
	s.watch.list = append(s.watch.list, w)
	s.watchDeadlines()
	s.update()
	return w
}

// Beat tells readiness that the loop has turned: with no lock and no
// allocation when met; when overdue, readiness recovers before it returns.
// A loop that waits for events beats on an idle tick too.
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
	// After the store of last: see met.
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
	if w.stopped {
		return
	}
	if !w.overdue {
		// Another Beat got here first and published; or w beat while
		// disabled, and SetWatchdogs switched it on (retune).
		if w.unknownBeater {
			w.goid, w.unknownBeater = goid, false
		}
		w.met.Store(true)
		return
	}
	w.overdue = false
	w.goid, w.unknownBeater = goid, false
	w.stack = ""
	if w.late {
		w.late = false
		s.log(slog.LevelInfo, "health: subsystem responsive again", "subsystem", w.name,
			"after", roundAfter(s.sinceEpoch()-w.lateFrom))
	}
	s.watchDeadlines()
	s.update()
	if !w.overdue { // a timeout shorter than the wait for the lock has passed again
		w.met.Store(true)
	}
}

// Stop stops watching a loop that ends on purpose: the watchdog counts no
// more, leaves Status, and a later Beat does nothing. Stop twice is fine.
func (w *Watchdog) Stop() {
	s := w.s
	s.mu.Lock()
	defer s.unlock()
	if w.stopped {
		return
	}
	s.expire() // a deadline passed before Stop counts, whether its timer has run or not
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
func (s *Server) sinceEpoch() time.Duration { return s.clock.now().Sub(s.epoch) }

// unresponsive reports whether a watchdog is overdue. s.mu must be held.
func (s *Server) unresponsive() bool {
	for _, w := range s.watch.list {
		if w.overdue {
			return true
		}
	}
	return false
}

// unresponsiveDetail is Ready's error for ErrSubsystemUnresponsive: every
// overdue watchdog, quoted, with its timeout. s.mu must be held.
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

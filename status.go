package health

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/meshnode/health/internal/listener"
)

// Status is a snapshot for the agent's metrics (healthprom) and own surfaces.
// Its times are the wall clock now less their age: a clock step moves none.
type Status struct {
	Unmet          []error          // every unmet condition's sentinel, in table order; empty when ready
	Check          CheckStatus      // the data-plane check
	Conns          ConnStatus       // Serve's connections
	Probes         ProbeCounts      // answers of Handler(), wherever it is mounted
	Watchdogs      []WatchdogStatus // every watchdog not stopped, in Watch order
	WatchdogTotals []WatchdogTotals // every name ever watched, in the order of its first Watch
	Stopped        []string         // the names given to SetSubsystemStopped, each once, in order
	Since          time.Time        // when the set of unmet conditions last changed; NewServer's time before
}

// CheckStatus describes the data-plane check. Its counts span replacements
// and count only results that fed readiness; a runtime.Goexit is a failure.
type CheckStatus struct {
	Installed    bool          // a non-nil fn is set (still true once its ctx is done)
	Runs         uint64        // checks that returned, failures and panics included
	Failures     uint64        // of Runs, those that returned an error or panicked
	Panics       uint64        // of Failures, those that panicked
	Stalls       uint64        // times a check ran past the stall bound (three periods)
	LastDuration time.Duration // how long the last returned check ran
	LastReturned time.Time     // when it returned; zero before the first
	LastError    error         // its error (a panic's too), kept across a replacement; nil when it passed
	Stack        string        // while stalled, its ERROR line's stack of the check's goroutine, once taken; else empty
}

// ProbeCounts count Handler()'s answers by kind: counts that do not grow show
// a kubelet that misses the listener.
type ProbeCounts struct {
	Liveness      uint64 // /healthz answered 200
	ReadyOK       uint64 // /readyz answered 200, /readyz/<check> and excludes too
	ReadyNotReady uint64 // /readyz answered 503, likewise
	Other         uint64 // 404 and 405 answers
}

// probeCounters are ProbeCounts as the handler increments them: atomics,
// so that counting takes no lock and allocates nothing.
type probeCounters struct {
	liveness      atomic.Uint64
	readyOK       atomic.Uint64
	readyNotReady atomic.Uint64
	other         atomic.Uint64
}

func (pc *probeCounters) counts() ProbeCounts {
	return ProbeCounts{
		Liveness:      pc.liveness.Load(),
		ReadyOK:       pc.readyOK.Load(),
		ReadyNotReady: pc.readyNotReady.Load(),
		Other:         pc.other.Load(),
	}
}

// Status returns a snapshot, never slowing a probe. Its readiness, check and
// watchdog states agree; its counters may be a few apart.
func (s *Server) Status() Status { return s.status(s.readClock()) }

// status is Status at the clock reading now, which a test may step.
func (s *Server) status(now clockReading) Status {
	s.mu.Lock()
	unmet := s.verdict.Load().unmet
	check := s.checks.status(s.checkInstalled(), now)
	check.Stack = s.check.stack
	stopped := slices.Clone(s.stopped)
	watchdogs, totals := s.watchdogStatus(now)
	since := now.at(s.since)
	s.mu.Unlock()
	return Status{
		Unmet:          unmet.sentinels(),
		Check:          check,
		Conns:          connStatus(&s.conns),
		Probes:         s.probes.counts(),
		Watchdogs:      watchdogs,
		WatchdogTotals: totals,
		Stopped:        stopped,
		Since:          since,
	}
}

// clockReading is one reading of the clock, from which Status gives the
// instants it reports (a watchdog's last Beat, the check's last return) as
// the wall clock reads them now: the wall time of the reading less the
// instant's age on the monotonic clock. The wall clock may be stepped
// between the instant and the reading (by NTP on a node that booted with
// a wrong clock, say); the age is still exact, so time() minus the
// instant, on a dashboard, is the real age. A wall time kept from the
// instant itself would be off by the step.
type clockReading struct {
	wall       time.Time     // the clock's now, its monotonic reading included
	sinceEpoch time.Duration // the same reading, on the monotonic clock since Server.epoch
}

func (s *Server) readClock() clockReading {
	now := s.clock.now()
	return clockReading{wall: now, sinceEpoch: now.Sub(s.epoch)}
}

// at returns the time of the instant that was sinceEpoch on the monotonic
// clock. It carries a monotonic reading too, so time.Since of it is exact.
func (c clockReading) at(sinceEpoch time.Duration) time.Time {
	return c.wall.Add(sinceEpoch - c.sinceEpoch)
}

// pressureWindow is how long after its last eviction the limiter still
// reports pressure: long enough that a flood pausing a few seconds between
// bursts reads as one. A scrape every 15 s can miss a burst that ended more
// than 10 s before it; Evicted, a counter, still shows it.
const pressureWindow = 10 * time.Second

// ConnStatus is Serve's connections, summed over Serve calls.
type ConnStatus struct {
	Held     int    // connections held now: waiting for a whole header, or held after their answer
	Limit    int    // the bound on Held (Server.Serve); 0 when Serve is not running
	Accepted uint64 // connections accepted since Serve began
	Evicted  uint64 // of those, closed to make room: a local flood's signature
	Pressure bool   // Serve is defending itself now: it evicted within the last 10 s
}

// connStatus reads the listener's counters, which the Server keeps so
// that Status can read them without reaching into a running Serve.
func connStatus(c *listener.Counters) ConnStatus {
	last := c.LastEviction.Load()
	return ConnStatus{
		Held:     int(c.Held.Load()),
		Limit:    int(c.Limit.Load()),
		Accepted: c.Accepted.Load(),
		Evicted:  c.Evicted.Load(),
		Pressure: last != 0 && time.Duration(listener.MonotonicNow()-last) < pressureWindow,
	}
}

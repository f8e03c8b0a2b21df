package health

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/meshnode/health/internal/listener"
)

// Status is a snapshot of the Server for the agent's own code: its metrics
// collector reads it at scrape time, and its authenticated surfaces show
// it. The package itself exports no metrics, so that it stays free of any
// metrics dependency: the module github.com/meshnode/health/healthprom is
// the collector for the Prometheus Go client, and the example of
// Server.Status writes a Status in the Prometheus text format with the
// standard library alone.
type Status struct {
	// Unmet holds the sentinel of every unmet readiness condition, in the
	// order of the readiness table, where Ready names only the first: a
	// stopped subsystem behind stopped delivery shows too. It is empty
	// when the node is ready. Each entry is the sentinel itself, so ==
	// and errors.Is both find it.
	Unmet  []error
	Check  CheckStatus // the data-plane check
	Conns  ConnStatus  // Serve's connections
	Probes ProbeCounts // answers of Handler(), wherever it is mounted
	// Watchdogs describes every watchdog not stopped, in Watch order.
	Watchdogs []WatchdogStatus
	// WatchdogTotals holds, for every name ever given to Watch, in the
	// order of its first Watch, the Beats and Timeouts of all its
	// watchdogs, stopped ones included: counters that never fall, for
	// metrics (see WatchdogTotals). A name stays for the Server's life,
	// so watch loops under a fixed set of names, not one per peer.
	WatchdogTotals []WatchdogTotals
	// Stopped holds the names given to SetSubsystemStopped, each once, in
	// the order of their first call: the names behind ErrSubsystemStopped,
	// which otherwise only the log and Ready's text carry.
	Stopped []string
	// Since is when the set of unmet conditions last changed, NewServer's
	// time until the first change: how long the node has been ready, or
	// not ready for the reasons in Unmet (a reason added or cleared moves
	// it; a setter that changes nothing, or only Ready's detail, does not).
	// Like LastBeat, it is the wall clock at Status less the time since,
	// so a step of the wall clock in between does not move it.
	Since time.Time
}

// CheckStatus describes the data-plane check (SetDataPlaneCheck). Its
// counters add up over the Server's life, across replacements and a nil
// fn, so that a metrics system can treat them as counters. They count the
// checks whose results feed readiness: the late result of a replaced check
// is discarded, and not counted either.
type CheckStatus struct {
	// Installed is whether a non-nil fn is set. It stays true once the
	// check's ctx is done, because the check's last verdict (or its
	// absence) still decides readiness.
	Installed bool
	// Runs counts the checks that returned, failures, panics and calls
	// of runtime.Goexit included:
	// a Runs that stops growing while Installed means the poller is
	// stuck or its ctx is done.
	Runs uint64
	// Failures counts, of Runs, those that returned an error, panicked
	// or called runtime.Goexit.
	Failures uint64
	// Panics counts, of Failures, those that panicked: a bug in the
	// check, which the poller survives.
	Panics uint64
	// Stalls counts the checks that ran past the stall bound (three
	// periods), whether or not they returned since.
	Stalls uint64
	// LastDuration is how long the last returned check ran: a check that
	// grows slower warns before one that stalls.
	LastDuration time.Duration
	// LastReturned is when the last check returned; zero before the first.
	// Its wall reading is the wall clock at Status less the time since the
	// check returned, so it stays right if the wall clock is stepped in
	// between (it may move by the clock's slew from one Status to the
	// next); its monotonic reading makes time.Since of it exact.
	LastReturned time.Time
	// LastError is the error the last returned check returned, a
	// recovered panic's included; nil when it passed or none has returned.
	// Like the counters it outlives a replacement and a nil fn: it
	// explains LastReturned, not the current verdict. It is for the
	// agent's authenticated surfaces; no body ever carries it.
	LastError error
}

// ProbeCounts count the answers of Handler(), wherever it is mounted, by
// kind. They tell an operator whether the kubelet reaches the node at all:
// under hostNetwork, a probe's httpGet.host that misses the listener is
// the classic mistake, and it shows as counts that do not grow.
type ProbeCounts struct {
	Liveness      uint64 // /healthz answered 200
	ReadyOK       uint64 // /readyz answered 200
	ReadyNotReady uint64 // /readyz answered 503
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

// Status returns a snapshot of readiness, the data-plane check, Serve's
// connections, the probes answered and the watchdogs. It never slows a
// probe: probes take no lock, and their counters are atomics. Unmet,
// Since, Check, Stopped and each watchdog's Overdue, Timeouts and Stack
// are read under the lock that orders readiness changes, so they agree
// with each other (a failed check in Unmet has its failure counted in
// Check, a stopped subsystem in Unmet has its name in Stopped, an overdue
// watchdog past a deadline has its Stack). The probe and connection counters and
// the watchdogs' Beats and LastBeat are read one by one while probes and
// Beats go on, so they may be a probe, a connection or a Beat apart from
// each other; WatchdogTotals add the very counts listed in Watchdogs, so
// the two agree.
func (s *Server) Status() Status { return s.status(s.readClock()) }

// status is Status at the clock reading now, which a test may step.
func (s *Server) status(now clockReading) Status {
	s.mu.Lock()
	unmet := s.verdict.Load().unmet
	check := s.checks.status(s.poller != nil, now)
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
	wall       time.Time     // time.Now(), its monotonic reading included
	sinceEpoch time.Duration // the same reading, on the monotonic clock since Server.epoch
}

func (s *Server) readClock() clockReading {
	now := time.Now()
	return clockReading{wall: now, sinceEpoch: now.Sub(s.epoch)}
}

// at returns the time of the instant that was sinceEpoch on the monotonic
// clock. It carries a monotonic reading too, so time.Since of it is exact.
func (c clockReading) at(sinceEpoch time.Duration) time.Time {
	return c.wall.Add(sinceEpoch - c.sinceEpoch)
}

// pressureWindow is how long after its last eviction the limiter still
// reports pressure: long enough that a scrape every 15 s or so sees a flood
// that comes in bursts.
const pressureWindow = 10 * time.Second

// ConnStatus is a snapshot of the connections Serve holds. With several
// Serve calls on one Server (one listener for IPv4 and one for IPv6, say),
// each field adds up over them: Held and Limit over those running now, the
// counts over every one since the Server was made.
//
// On Linux a connection whose request header has not arrived whole waits
// in Serve's waiting room (see Server.Serve), which holds no goroutine and
// no buffer: it is not Held. It counts in Accepted when it is accepted,
// once, and in Evicted if the room closes it to make room, not if its
// 2 s header timeout closes it. A connection whose client has already
// gone when it is accepted counts as accepted, never as held or evicted.
type ConnStatus struct {
	Held     int    // connections held now (counted until their goroutines end)
	Limit    int    // the bound on Held: a quarter of the soft descriptor limit, at most 256; 0 when Serve is not running
	Accepted uint64 // connections accepted since Serve began (the first one, with several)
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

package health

import (
	"fmt"
	"log/slog"
	"math/bits"
	"strings"
	"time"
)

// DeliveryMode is how the agent receives its events, with the values of the
// agent's own mode type, so the agent converts with health.DeliveryMode(m).
// A value but streaming and pull_only, the empty one included, is degraded.
type DeliveryMode string

const (
	DeliveryModeStreaming       DeliveryMode = "streaming"        // ready
	DeliveryModePullOnly        DeliveryMode = "pull_only"        // ready: a deliberate descope; the node reconciles
	DeliveryModeDegradedPolling DeliveryMode = "degraded_polling" // not ready: events arrive late
)

// ready reports whether m lets the node serve: a mode a newer agent
// invents must not read as healthy.
func (m DeliveryMode) ready() bool {
	return m == DeliveryModeStreaming || m == DeliveryModePullOnly
}

// verdict is everything a probe or Status reads of readiness, computed when
// the state changes. A verdict is never modified once stored.
type verdict struct {
	reason         reason    // the first unmet condition: the /readyz answer
	unmet          reasonSet // every unmet condition
	err            error     // Ready's error: the reason's sentinel, with detail
	checkRuns      uint64    // the check results recorded when err was made
	checkInstalled bool      // a data-plane check is set, so verbose shows its line
	// verbose is every /readyz?verbose answer of this state, by the checks
	// a query excludes and whether it names one that is none, built here
	// so that a verbose probe only loads one: 64 answers, some 70 KB, made
	// once per change of readiness rather than once per probe (see
	// BenchmarkVerdictChange).
	verbose [][2]response
}

// newVerdict returns the verdict of the unmet conditions, with its
// verbose answers built now.
func newVerdict(unmet reasonSet, err error, checkInstalled bool) *verdict {
	v := &verdict{reason: unmet.first(), unmet: unmet, err: err, checkInstalled: checkInstalled,
		verbose: make([][2]response, 1<<len(checks))}
	for excluded := range v.verbose {
		for unknown := range v.verbose[excluded] {
			v.verbose[excluded][unknown] = verboseResponse(unmet, checkInstalled, checkMask(excluded), unknown == 1)
		}
	}
	return v
}

// Ready returns nil when /readyz would answer 200, else an error that
// errors.Is the first unmet condition's sentinel, with detail.
func (s *Server) Ready() error {
	return s.verdict.Load().err
}

// SetRegistered latches that the node has registered with the control plane.
func (s *Server) SetRegistered() { s.set(func() { s.registered = true }) }

// SetDataPlaneReady latches that the data plane (the WireGuard interface and
// firewall chain) is configured.
func (s *Server) SetDataPlaneReady() { s.set(func() { s.dataPlaneReady = true }) }

// SetDeliveryMode records the latest delivery mode: the one setter that is
// not a latch, as the reconnect engine moves between modes and back.
func (s *Server) SetDeliveryMode(m DeliveryMode) { s.set(func() { s.mode = m }) }

// set changes the state under the lock and updates the verdict.
func (s *Server) set(change func()) {
	s.mu.Lock()
	defer s.unlock()
	change()
	s.update()
}

// SetDeliveryStopped latches that event delivery has stopped for good.
func (s *Server) SetDeliveryStopped() { s.set(func() { s.deliveryStopped = true }) }

// SetSubsystemStopped latches that a subsystem stopped and logs its name at
// error level. Any name latches; it is quoted, and never reaches a body.
func (s *Server) SetSubsystemStopped(name string) {
	s.mu.Lock()
	defer s.unlock()
	s.log(slog.LevelError, "health: subsystem stopped", "subsystem", name)
	for _, n := range s.stopped {
		if n == name {
			return
		}
	}
	s.stopped = append(s.stopped, name)
	s.update()
}

// update recomputes the verdict, counting every deadline and stall bound
// the clock has passed (expire), stores it if it changed, queues a line
// for a change of the /readyz answer and wakes Changed's watchers when the
// set of unmet conditions changed. s.mu must be held: the lock orders the
// stores, so a probe never sees an older verdict after a newer one, and it
// orders the lines as the changes they report.
func (s *Server) update() {
	s.expire()
	unmet := s.unmet()
	first := unmet.first()
	err := s.detail(first)
	installed := s.checkInstalled()
	prev := s.verdict.Load()
	if unmet == prev.unmet && installed == prev.checkInstalled {
		// Only Ready's error may be new: its text, or a check error it
		// wraps that reads as the last did, which errors.Is must find.
		if !sameError(err, prev.err) || s.checks.runs != prev.checkRuns {
			v := *prev // the answers stand: they depend on unmet alone
			v.err, v.checkRuns = err, s.checks.runs
			s.verdict.Store(&v)
		}
		return
	}
	v := newVerdict(unmet, err, installed)
	v.checkRuns = s.checks.runs
	s.verdict.Store(v)
	if first != prev.reason {
		s.logReadinessChange(prev.reason, first)
	}
	if unmet != prev.unmet {
		s.since = s.sinceEpoch()
		s.announceChange()
	}
}

// logReadinessChange logs a change of the /readyz answer. Only leaving
// ready is a warning: every start walks through "registration pending" and
// "data plane not configured", and a warning there would teach operators to
// ignore the one that matters, which is a ready node going out of service.
// Bring-up progress, recovery and a change from one unmet reason to another
// are information. The line of a recovery says how long readiness was
// lost (since NewServer, the first time), so that nobody pairs lines by
// hand to learn an outage's length. s.mu must be held.
func (s *Server) logReadinessChange(prev, next reason) {
	now := s.sinceEpoch()
	switch {
	case next == reasonReady:
		s.log(slog.LevelInfo, "health: readiness changed", "ready", true, "after", roundAfter(now-s.unreadySince))
		if !s.everReady {
			s.everReady = true
			s.warnUnusedOverrides(s.overrides, nil)
		}
	case prev == reasonReady:
		s.unreadySince = now
		s.log(slog.LevelWarn, "health: readiness changed", "ready", false, "reason", next.String())
	default:
		s.log(slog.LevelInfo, "health: readiness changed", "ready", false, "reason", next.String())
	}
}

// roundAfter rounds a recovery line's after to the millisecond: a time a
// person reads, where nanoseconds are noise.
func roundAfter(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

// unmet returns every unmet condition. s.mu must be held.
func (s *Server) unmet() reasonSet {
	var rs reasonSet
	for r, c := range conditions {
		rs = rs.add(reason(r), c.unmet(s))
	}
	return rs
}

// detail returns Ready's error for r: r's sentinel, wrapped with what its
// row adds for the agent's authenticated surfaces. s.mu must be held.
func (s *Server) detail(r reason) error {
	if r == reasonReady {
		return nil
	}
	if c := conditions[r]; c.detail != nil {
		return c.detail(s)
	}
	return conditions[r].err
}

func sameError(a, b error) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Error() == b.Error()
}

// condition is one row of the readiness table, everything each surface
// reads of it: /readyz and its verbose, one-check and excluding forms,
// Ready, Status and the metrics all take the rows from conditions, so
// that a row added there shows everywhere.
type condition struct {
	// err is the row's sentinel; "not ready: " and its text are the
	// row's body (responseReadiness).
	err error
	// check is the name of the check that covers the row: its
	// /readyz?verbose line, /readyz/<check> and ?exclude=<check>, as the
	// Kubernetes API server names its checks. The rows of a check are
	// consecutive.
	check string
	// whileInstalled: the row exists only while a data-plane check is
	// set, and so does its check's verbose line.
	whileInstalled bool
	// unmet reports whether the row holds the node back. s.mu is held.
	unmet func(s *Server) bool
	// detail is Ready's error for the row, the sentinel wrapped with what
	// the agent's own surfaces may see; nil for the sentinel alone. s.mu
	// is held.
	detail func(s *Server) error
}

// conditions is the readiness table, in the order of precedence: /readyz
// names the first unmet row.
var conditions = [...]condition{
	{err: ErrRegistrationPending, check: "registration",
		unmet: func(s *Server) bool { return !s.registered }},
	{err: ErrDataPlanePending, check: "data-plane",
		unmet: func(s *Server) bool { return !s.dataPlaneReady }},
	{err: ErrDataPlaneCheckPending, check: "data-plane-check", whileInstalled: true,
		unmet: func(s *Server) bool { return s.check.pending }},
	{err: ErrDataPlaneLost, check: "data-plane-check", whileInstalled: true,
		unmet: func(s *Server) bool { return s.check.err != nil },
		// Two %w: errors.Is finds both the sentinel and the check's own
		// error, so the agent can tell "interface missing" from a timeout.
		detail: func(s *Server) error { return fmt.Errorf("%w: %w", ErrDataPlaneLost, s.check.err) }},
	{err: ErrDataPlaneStalled, check: "data-plane-check", whileInstalled: true,
		unmet: func(s *Server) bool { return s.check.stalled },
		detail: func(s *Server) error {
			return fmt.Errorf("%w: a check has not returned within %v", ErrDataPlaneStalled, s.stallBound())
		}},
	{err: ErrDeliveryStopped, check: "event-delivery",
		unmet: func(s *Server) bool { return s.deliveryStopped }},
	{err: ErrDeliveryDegraded, check: "event-delivery",
		unmet:  func(s *Server) bool { return !s.mode.ready() },
		detail: func(s *Server) error { return fmt.Errorf("%w: mode %q", ErrDeliveryDegraded, string(s.mode)) }},
	{err: ErrSubsystemStopped, check: "subsystems",
		unmet:  func(s *Server) bool { return len(s.stopped) > 0 },
		detail: (*Server).stoppedDetail},
	{err: ErrSubsystemUnresponsive, check: "subsystems",
		unmet:  (*Server).unresponsive,
		detail: (*Server).unresponsiveDetail},
}

// stoppedDetail is Ready's error for ErrSubsystemStopped: every stopped
// subsystem's name, quoted. s.mu must be held.
func (s *Server) stoppedDetail() error {
	quoted := make([]string, len(s.stopped))
	for i, n := range s.stopped {
		quoted[i] = fmt.Sprintf("%q", n)
	}
	return fmt.Errorf("%w: %s", ErrSubsystemStopped, strings.Join(quoted, ", "))
}

// reason is a row of conditions; reasonReady means none is unmet.
type reason uint8

const reasonReady = reason(len(conditions))

// Conditions returns every condition's sentinel, met or not, in table order,
// in a new slice, so that a metrics collector needs no table of its own.
func Conditions() []error {
	errs := make([]error, len(conditions))
	for r, c := range conditions {
		errs[r] = c.err
	}
	return errs
}

// reasonSet holds reasons, one bit each: every condition unmet at once,
// which /readyz?verbose and Status show, where /readyz names only the first.
type reasonSet uint16

func (rs reasonSet) add(r reason, unmet bool) reasonSet {
	if unmet {
		rs |= 1 << r
	}
	return rs
}

// first returns the set's first reason in table order, and reasonReady when
// the set is empty.
func (rs reasonSet) first() reason {
	if rs == 0 {
		return reasonReady
	}
	return reason(bits.TrailingZeros16(uint16(rs)))
}

// sentinels returns the sentinel of each reason of rs, in table order.
func (rs reasonSet) sentinels() []error {
	var errs []error
	for r, c := range conditions {
		if rs&(1<<r) != 0 {
			errs = append(errs, c.err)
		}
	}
	return errs
}

// String is the text logged when readiness changes: the sentinel's text, or
// "ready".
func (r reason) String() string {
	if r == reasonReady {
		return "ready"
	}
	return conditions[r].err.Error()
}

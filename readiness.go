package health

import (
	"fmt"
	"log/slog"
	"math/bits"
	"slices"
	"strings"
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
	reason   reason    // the first unmet condition: the /readyz answer
	unmet    reasonSet // every unmet condition
	err      error     // Ready's error: the reason's sentinel, with detail
	checkSet bool      // a data-plane check is set, so verbose has its line
	verbose  response  // the /readyz?verbose answer
}

// newVerdict returns the verdict of the unmet conditions, with its
// verbose answer built now, so that a verbose probe only loads it.
func newVerdict(unmet reasonSet, err error, checkSet bool) *verdict {
	return &verdict{
		reason:   unmet.first(),
		unmet:    unmet,
		err:      err,
		checkSet: checkSet,
		verbose:  verboseResponse(unmet, checkSet),
	}
}

// Ready returns nil when /readyz would answer 200, else an error that
// errors.Is the first unmet condition's sentinel, its text carrying detail
// for the agent's authenticated uses.
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

// update recomputes the verdict and stores it if it changed, queues a line
// for a change of the /readyz answer and wakes Changed's watchers when the
// set of unmet conditions changed. s.mu must be held: the lock orders the
// stores, so a probe never sees an older verdict after a newer one, and it
// orders the lines as the changes they report.
func (s *Server) update() {
	unmet := s.unmet()
	first := unmet.first()
	err := s.detail(first)
	checkSet := s.poller != nil
	prev := s.verdict.Load()
	if unmet == prev.unmet && checkSet == prev.checkSet && sameError(err, prev.err) {
		return
	}
	s.verdict.Store(newVerdict(unmet, err, checkSet))
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
// are information. s.mu must be held.
func (s *Server) logReadinessChange(prev, next reason) {
	switch {
	case next == reasonReady:
		s.log(slog.LevelInfo, "health: readiness changed", "ready", true)
	case prev == reasonReady:
		s.log(slog.LevelWarn, "health: readiness changed", "ready", false, "reason", next.String())
	default:
		s.log(slog.LevelInfo, "health: readiness changed", "ready", false, "reason", next.String())
	}
}

// unmet returns every unmet condition of the readiness table. s.mu must be
// held.
func (s *Server) unmet() reasonSet {
	var rs reasonSet
	rs = rs.add(reasonRegistrationPending, !s.registered)
	rs = rs.add(reasonDataPlanePending, !s.dataPlaneReady)
	rs = rs.add(reasonDataPlaneCheckPending, s.check.pending)
	rs = rs.add(reasonDataPlaneLost, s.check.err != nil)
	rs = rs.add(reasonDataPlaneStalled, s.check.stalled)
	rs = rs.add(reasonDeliveryStopped, s.deliveryStopped)
	rs = rs.add(reasonDeliveryDegraded, !s.mode.ready())
	rs = rs.add(reasonSubsystemStopped, len(s.stopped) > 0)
	rs = rs.add(reasonSubsystemUnresponsive, s.unresponsive())
	return rs
}

// detail returns Ready's error for r: r's sentinel, wrapped with what the
// agent's authenticated surfaces may see (the check's error, the mode, the
// stopped subsystems' names, the overdue watchdogs'). s.mu must be held.
func (s *Server) detail(r reason) error {
	switch r {
	case reasonReady:
		return nil
	case reasonDataPlaneLost:
		// Two %w: errors.Is finds both the sentinel and the check's own
		// error, so the agent can tell "interface missing" from a timeout.
		return fmt.Errorf("%w: %w", ErrDataPlaneLost, s.check.err)
	case reasonDataPlaneStalled:
		return fmt.Errorf("%w: a check has not returned within %v", ErrDataPlaneStalled, s.stallBound())
	case reasonDeliveryDegraded:
		return fmt.Errorf("%w: mode %q", ErrDeliveryDegraded, string(s.mode))
	case reasonSubsystemStopped:
		quoted := make([]string, len(s.stopped))
		for i, n := range s.stopped {
			quoted[i] = fmt.Sprintf("%q", n)
		}
		return fmt.Errorf("%w: %s", ErrSubsystemStopped, strings.Join(quoted, ", "))
	case reasonSubsystemUnresponsive:
		return s.unresponsiveDetail()
	}
	return reasons[r]
}

func sameError(a, b error) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Error() == b.Error()
}

// reason is the index of the first unmet readiness condition; reasonReady
// means none is unmet. The order of the constants is the order of
// precedence, which the table reasons below mirrors.
type reason uint8

const (
	reasonRegistrationPending reason = iota
	reasonDataPlanePending
	reasonDataPlaneCheckPending
	reasonDataPlaneLost
	reasonDataPlaneStalled
	reasonDeliveryStopped
	reasonDeliveryDegraded
	reasonSubsystemStopped
	reasonSubsystemUnresponsive
	reasonReady
)

// reasons maps each reason to its sentinel, whose text makes its /readyz
// body (readinessResponses).
var reasons = [...]error{
	reasonRegistrationPending:   ErrRegistrationPending,
	reasonDataPlanePending:      ErrDataPlanePending,
	reasonDataPlaneCheckPending: ErrDataPlaneCheckPending,
	reasonDataPlaneLost:         ErrDataPlaneLost,
	reasonDataPlaneStalled:      ErrDataPlaneStalled,
	reasonDeliveryStopped:       ErrDeliveryStopped,
	reasonDeliveryDegraded:      ErrDeliveryDegraded,
	reasonSubsystemStopped:      ErrSubsystemStopped,
	reasonSubsystemUnresponsive: ErrSubsystemUnresponsive,
}

// Conditions returns every condition's sentinel, met or not, in table order,
// in a new slice, so that a metrics collector needs no table of its own.
func Conditions() []error {
	return slices.Clone(reasons[:])
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

func (rs reasonSet) has(r reason) bool { return rs&(1<<r) != 0 }

// within returns the reasons of rs from first to last, both included.
func (rs reasonSet) within(first, last reason) reasonSet {
	return rs & (1<<(last+1) - 1<<first)
}

// sentinels returns the sentinel of each reason of rs, in table order.
func (rs reasonSet) sentinels() []error {
	var errs []error
	for r := range reasonReady {
		if rs.has(r) {
			errs = append(errs, reasons[r])
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
	return reasons[r].Error()
}

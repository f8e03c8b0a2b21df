package health

import (
	"fmt"
	"strings"
)

// DeliveryMode is how the agent currently receives its events. It has the
// same values as the agent's own mode type, so the agent converts with
// health.DeliveryMode(m) rather than through a mapping that could drift.
type DeliveryMode string

const (
	// DeliveryModeStreaming is the normal mode: ready.
	DeliveryModeStreaming DeliveryMode = "streaming"
	// DeliveryModePullOnly is a deliberate descope: the node still
	// reconciles, so it stays ready.
	DeliveryModePullOnly DeliveryMode = "pull_only"
	// DeliveryModeDegradedPolling means events arrive late: not ready.
	DeliveryModeDegradedPolling DeliveryMode = "degraded_polling"
)

// ready reports whether m lets the node serve. Any value other than
// streaming and pull_only counts as degraded, the empty string and values a
// newer agent may invent included: an unknown mode must not read as healthy.
func (m DeliveryMode) ready() bool {
	return m == DeliveryModeStreaming || m == DeliveryModePullOnly
}

// verdict is an answer of /readyz and the detailed error Ready returns for
// it. A verdict is never modified once stored.
type verdict struct {
	reason reason
	err    error
}

// Ready returns nil when /readyz would answer 200, and otherwise an error
// that errors.Is the sentinel of the first unmet condition. Unlike the
// /readyz body, its text carries detail (the last check error, the stopped
// subsystems' names), so it is for the agent's authenticated surfaces only.
func (s *Server) Ready() error {
	return s.answer.Load().err
}

// SetRegistered latches that the node has registered with the control
// plane.
func (s *Server) SetRegistered() { s.set(func() { s.registered = true }) }

// SetDataPlaneReady latches that the WireGuard interface and firewall chain
// are configured.
func (s *Server) SetDataPlaneReady() { s.set(func() { s.dataPlaneReady = true }) }

// SetDeliveryMode records the latest delivery mode. It is the one setter
// that is not a latch: the reconnect engine moves between modes and back.
func (s *Server) SetDeliveryMode(m DeliveryMode) { s.set(func() { s.mode = m }) }

// set changes the state under the lock and updates the verdict.
func (s *Server) set(change func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	change()
	s.update()
}

// SetDeliveryStopped latches that event delivery has stopped for good.
func (s *Server) SetDeliveryStopped() { s.set(func() { s.deliveryStopped = true }) }

// SetSubsystemStopped latches that a subsystem has stopped and logs its name
// at error level, quoted by the logger, never interpreted. Any name latches,
// the empty one included; a name only reaches Ready's error text, never a
// probe's body.
func (s *Server) SetSubsystemStopped(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.logger.Error("health: subsystem stopped", "subsystem", name)
	for _, n := range s.stopped {
		if n == name {
			return
		}
	}
	s.stopped = append(s.stopped, name)
	s.update()
}

// update recomputes the verdict from the latches and stores it if it
// changed, logging a change of the /readyz answer once. The line is written
// before the verdict is published, so that whoever sees the new answer
// finds its line in the log. s.mu must be held: the lock orders the stores,
// so a probe never sees an older verdict after a newer one.
func (s *Server) update() {
	next := s.evaluate()
	prev := s.answer.Load()
	if next.reason == prev.reason && sameError(next.err, prev.err) {
		return
	}
	if next.reason != prev.reason {
		s.logReadinessChange(prev.reason, next.reason)
	}
	s.answer.Store(next)
}

// logReadinessChange logs a change of the /readyz answer. Only leaving
// ready is a warning: every start walks through "registration pending" and
// "data plane not configured", and a warning there would teach operators to
// ignore the one that matters, which is a ready node going out of service.
// Bring-up progress, recovery and a change from one unmet reason to another
// are information.
func (s *Server) logReadinessChange(prev, next reason) {
	switch {
	case next == reasonReady:
		s.logger.Info("health: readiness changed", "ready", true)
	case prev == reasonReady:
		s.logger.Warn("health: readiness changed", "ready", false, "reason", next.String())
	default:
		s.logger.Info("health: readiness changed", "ready", false, "reason", next.String())
	}
}

// evaluate walks the conditions in the order of the readiness table and
// returns the first unmet one. s.mu must be held.
func (s *Server) evaluate() *verdict {
	switch {
	case !s.registered:
		return &verdict{reasonRegistrationPending, ErrRegistrationPending}
	case !s.dataPlaneReady:
		return &verdict{reasonDataPlanePending, ErrDataPlanePending}
	case s.check.pending:
		return &verdict{reasonDataPlaneCheckPending, ErrDataPlaneCheckPending}
	case s.check.err != nil:
		// Two %w: errors.Is finds both the sentinel and the check's own
		// error, so the agent can tell "interface missing" from a timeout.
		return &verdict{reasonDataPlaneLost, fmt.Errorf("%w: %w", ErrDataPlaneLost, s.check.err)}
	case s.check.stalled:
		return &verdict{reasonDataPlaneStalled, fmt.Errorf("%w: a check has not returned within %v", ErrDataPlaneStalled, s.stallBound())}
	case s.deliveryStopped:
		return &verdict{reasonDeliveryStopped, ErrDeliveryStopped}
	case !s.mode.ready():
		return &verdict{reasonDeliveryDegraded, fmt.Errorf("%w: mode %q", ErrDeliveryDegraded, string(s.mode))}
	case len(s.stopped) > 0:
		quoted := make([]string, len(s.stopped))
		for i, n := range s.stopped {
			quoted[i] = fmt.Sprintf("%q", n)
		}
		return &verdict{reasonSubsystemStopped, fmt.Errorf("%w: %s", ErrSubsystemStopped, strings.Join(quoted, ", "))}
	}
	return &verdict{reasonReady, nil}
}

func sameError(a, b error) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Error() == b.Error()
}

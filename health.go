// Package health answers the kubelet's liveness and readiness probes for a
// host-networked node agent, such as a WireGuard mesh agent run as a
// DaemonSet.
//
// Liveness (GET /healthz) is always 200: a liveness failure restarts the
// container, and the restart runs the agent's drain path, which deletes the
// WireGuard interface and the firewall chain. Nothing the agent's state or a
// local client does may turn it into anything else.
//
// Readiness (GET /readyz) is the conjunction of latches that the agent sets
// as it comes up (registered, data plane configured, event delivery working,
// no subsystem stopped), of a watchdog for each of the agent's loops that
// it watches (a loop that hangs stops beating, and the node goes out of
// service while liveness stays 200) and, once the agent sets a background
// data-plane check, of that check's last verdict: until the check has
// returned once, the node is not ready, because readiness needs evidence. It names the
// first unmet condition in a fixed order, so that a rolling update never
// proceeds past a node whose data plane is gone or not yet checked.
//
// The agent learns of a change of readiness from [Server.Changed] without
// polling it, and asks for a data-plane check at once, when it knows the
// data plane changed, with [Server.CheckNow].
//
// A person debugging a node asks for /readyz?verbose, which lists every
// condition, met or not, in the Kubernetes API server's format, where
// /readyz names only the first unmet one.
//
// The endpoints are unauthenticated, so every body is made of this
// package's constants: no node name, address, subsystem name, error text,
// time or version ever leaves the process through them. The agent's own,
// authenticated surfaces get the detail from [Server.Ready] and the
// counts from [Server.Status].
//
// A probe takes no lock, writes no log line and allocates nothing: every
// answer is computed when a latch or the poller changes it, and a probe only
// loads it.
//
// Anything that can reach the port can use it, so [Server.Serve] bounds
// what a connection can hold (time, header bytes, one request) and how many
// connections it holds, evicting those without a complete request rather
// than refusing newcomers: no number of stalled or silent local clients
// may cost the kubelet its probe, nor grow the agent's memory.
package health

import (
	"errors"
	"math/bits"
)

// DefaultListen is the loopback address the kubelet's httpGet probe (with
// host: 127.0.0.1) reaches under hostNetwork. It is loopback because the
// endpoints are unauthenticated.
const DefaultListen = "127.0.0.1:9101"

// The reasons readiness can fail, in the order /readyz reports them. Each
// sentinel's text is the suffix of its constant /readyz body, so the body a
// kubelet logs and the error an operator greps for name the same thing.
// [Server.Ready] returns errors that wrap these; test with [errors.Is].
var (
	ErrRegistrationPending   = errors.New("registration pending")
	ErrDataPlanePending      = errors.New("data plane not configured")
	ErrDataPlaneCheckPending = errors.New("data plane check pending")
	ErrDataPlaneLost         = errors.New("data plane lost")
	ErrDataPlaneStalled      = errors.New("data plane check stalled")
	ErrDeliveryStopped       = errors.New("event delivery stopped")
	ErrDeliveryDegraded      = errors.New("event delivery degraded")
	ErrSubsystemStopped      = errors.New("subsystem stopped")
	ErrSubsystemUnresponsive = errors.New("subsystem unresponsive")
)

// The only bodies the handler writes. They are fixed bytes, never formatted,
// so that nothing from the process's state can reach an unauthenticated
// client.
const (
	bodyOK               = "ok\n"
	bodyNotFound         = "404 page not found\n"
	bodyMethodNotAllowed = "Method Not Allowed\n"
)

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

// reasons maps each reason to its sentinel; the /readyz body of a failing
// reason is "not ready: " + the sentinel's text + "\n", built once in
// readinessResponses.
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

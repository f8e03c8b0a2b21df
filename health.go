// Package health answers the kubelet's liveness and readiness probes for a
// host-networked node agent, such as a WireGuard mesh agent run as a
// DaemonSet.
//
// Liveness (/healthz) is always 200: a liveness failure restarts the
// container, and the restart runs the agent's drain path, which tears the
// data plane down. Readiness (/readyz) holds while every condition is met:
// the latches the agent sets as it comes up, a [Watchdog] per loop, and
// the verdict of a data-plane check once one is set. Readiness needs
// evidence: a check that has not returned, or a watchdog that has not
// beaten, leaves the node not ready. Every body is one of the package's
// constants, because the endpoints are unauthenticated; the detail is for
// the agent's own surfaces ([Server.Ready], [Server.Status]).
//
// Each check of /readyz?verbose answers alone at /readyz/<check>, and
// /readyz?exclude=<check> leaves it out, as the Kubernetes API server's:
//
//   - registration: [Server.SetRegistered]
//   - data-plane: [Server.SetDataPlaneReady]
//   - data-plane-check: [Server.SetDataPlaneCheck]; met while no check is set
//   - event-delivery: [Server.SetDeliveryStopped] and [Server.SetDeliveryMode]
//   - subsystems: [Server.SetSubsystemStopped] and the watchdogs
package health

import (
	"errors"
)

// DefaultListen is the address the kubelet's httpGet probe (host: 127.0.0.1)
// reaches under hostNetwork: loopback, as the endpoints are unauthenticated.
const DefaultListen = "127.0.0.1:9101"

// The reasons readiness can fail, in /readyz's order; each one's text ends
// its /readyz body. [Server.Ready]'s errors wrap them: test with [errors.Is].
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

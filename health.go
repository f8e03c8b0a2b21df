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
// as it comes up (registered, data plane configured, event delivery
// working, no subsystem stopped), of a watchdog for each of the agent's
// loops that it watches (a loop that hangs stops beating, and the node goes
// out of service while liveness stays 200) and, once the agent sets a
// background data-plane check, of that check's last verdict: until the
// check has returned once, the node is not ready, because readiness needs
// evidence. It names the first unmet condition in a fixed order, so that a
// rolling update never proceeds past a node whose data plane is gone or not
// yet checked.
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
// The log is the agent's, and it may stop taking lines (stderr that nobody
// reads blocks). So a line is written by a goroutine of the package's,
// after the change it reports is published and the call that made it has
// returned: a blocked log holds back neither readiness nor any method,
// and a log handler may call the Server.
//
// Anything that can reach the port can use it, so [Server.Serve] bounds
// what a connection can hold (time, header bytes, one request) and how many
// connections it holds, evicting those without a complete request rather
// than refusing newcomers: no number of stalled or silent local clients
// may cost the kubelet its probe, nor grow the agent's memory.
package health

import (
	"errors"
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

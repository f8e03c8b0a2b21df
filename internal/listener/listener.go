// Package listener is how bytes reach the probe answers: a server that no
// local process can use to cost the kubelet its probe, or the agent more
// CPU than a plain net/http server, or more than a bounded amount of
// memory and descriptors. A failed liveness probe restarts the agent, and
// the restart tears its data plane down.
//
// On Linux a connection takes one route, through three files:
// loop_linux.go accepts it, keeps it without a goroutine of its own, and
// no buffer but what it has sent, until its header is whole, and closes
// or holds it after its answer; request.go reads the header; answer.go
// writes the answer.
// Outside Linux, bounded.go serves through a plain http.Server behind the
// same bound.
//
// The caller hands Serve what to answer (an AnswerFunc, and the same
// answers as an http.Handler for outside Linux), how to count (Counters)
// and how to log (a LogFunc); the package names none of its paths.
package listener

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// The bounds of what a connection may hold, far above a probe's needs.
const (
	// holdTimeout bounds each stage a connection is held in: from accept
	// to a whole header, and from the answer to the close. The kubelet
	// writes at once and gives up after a second by default: longer would
	// only serve a slowloris client.
	holdTimeout = 2 * time.Second
	// maxHeader bounds a request header, its blank line included; a
	// kubelet's is about 130 bytes.
	maxHeader = 4 << 10
	// maxHeld bounds the connections held at once, each a descriptor, a
	// socket's kernel memory and at most maxHeader of header.
	maxHeld = 4096
	// descriptorRetry is how long accepting pauses when the process is
	// out of descriptors and holds no connection it could close.
	descriptorRetry = 10 * time.Millisecond
)

// LogFunc writes a log line as slog.Logger.Log does. Serve calls it on its
// own goroutine, so it must not wait for a sink.
type LogFunc func(level slog.Level, msg string, args ...any)

// logGate lets a line a client can provoke through at most once a minute,
// so that no flood fills the agent's log.
type logGate struct{ last time.Time }

func (g *logGate) due(now time.Time) bool {
	if now.Sub(g.last) < time.Minute { // the zero last is long past
		return false
	}
	g.last = now
	return true
}

// Response is a fixed answer of the caller's. Header is its header lines,
// each ending in CRLF, as the caller's http.Handler sets them, in the
// order net/http writes them (sorted by name), so that a probe gets
// net/http's bytes.
type Response struct {
	Status       int
	Header, Body []byte
}

// AnswerFunc returns and counts the answer to a request for path, with the
// query rawQuery, both as the target spells them (a path with an escape
// is none of the caller's). The strings are the listener's buffer, valid
// during the call only; it must not keep them, nor block.
type AnswerFunc func(method, path, rawQuery string) *Response

// Counters are what Serve counts. They are the caller's, so that several
// Serve calls add up and the caller reads them without reaching into one.
type Counters struct {
	Held         atomic.Int64  // connections held now: waiting for a header, or after their answer
	Limit        atomic.Int64  // the bound on Held, summed over the Serve calls running
	Accepted     atomic.Uint64 // connections accepted
	Evicted      atomic.Uint64 // of those, closed to make room
	LastEviction atomic.Int64  // MonotonicNow at the last eviction; 0 before one
}

func (c *Counters) countEviction() {
	c.Evicted.Add(1)
	c.LastEviction.Store(MonotonicNow())
}

var monotonicBase = time.Now()

// MonotonicNow is the time since the package was loaded on the monotonic
// clock, never 0, so that 0 can mean none, and a step of the wall clock
// moves nothing kept with it.
func MonotonicNow() int64 { return int64(time.Since(monotonicBase)) + 1 }

// Options are what Serve needs from its caller.
type Options struct {
	Answer   AnswerFunc
	Handler  http.Handler
	Counters *Counters
	Log      LogFunc

	limit int // the bound on Held for a test; 0: limitFor's
}

// Listen binds addr over TCP.
func Listen(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }

// limitFor is a Serve call's bound on held connections when the calls
// running with the same Counters hold taken: maxHeld, or what they left of
// three quarters of the soft descriptor limit (RLIMIT_NOFILE; 0, unknown)
// if less, at least 1, so that the probe ports never take the agent's last
// descriptors.
func limitFor(soft uint64, taken int64) int {
	left := int64(maxHeld)
	if soft > 0 {
		left = min(left, int64(soft*3/4)-taken)
	}
	return int(max(1, left))
}

// Serve answers the connections of ln, which it owns and closes, until ctx
// is done; then it stops accepting, lets each connection held reach its
// end (at most two holdTimeouts, a header's and its hold's; outside Linux
// shutdownBound), and returns nil, or an error once ln fails on its own.
// It returns only when every connection and goroutine it started has
// ended, and logs a line once serving and one when it stops.
func Serve(ctx context.Context, ln net.Listener, opts Options) error {
	limit := 0
	for limit == 0 {
		taken, l := opts.Counters.Limit.Load(), opts.limit
		if l == 0 {
			l = limitFor(softDescriptorLimit(), taken)
		}
		if opts.Counters.Limit.CompareAndSwap(taken, taken+int64(l)) {
			limit = l
		}
	}
	defer opts.Counters.Limit.Add(-int64(limit))
	addr := ln.Addr().String()
	if err := serve(ctx, ln, opts, limit); err != nil {
		opts.Log(slog.LevelError, "health: stopped serving probes: the listener failed", "addr", addr, "err", err)
		return fmt.Errorf("serving %q: %w", addr, err)
	}
	opts.Log(slog.LevelInfo, "health: stopped serving probes", "addr", addr)
	return nil
}

// serving logs that Serve serves, once it does, so that the line is true.
func serving(opts *Options, ln net.Listener, limit int) {
	opts.Log(slog.LevelInfo, "health: serving probes", "addr", ln.Addr().String(), "limit", limit)
}

package health

import (
	"context"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshnode/health/internal/listener"
)

// Server holds the readiness latches and serves the probes. Create it with
// NewServer; all its methods are safe for concurrent use.
type Server struct {
	cfg Config

	// verdict is what a probe reads. It is replaced, under mu, only
	// when a latch or the poller changes it, so a probe is one atomic load:
	// no lock, no allocation, whatever the rate of probes.
	verdict atomic.Pointer[verdict]

	// probes and conns are counted with atomics, outside mu, so that
	// counting takes no lock on the probe path or in Serve.
	probes probeCounters
	conns  listener.Counters

	// checkPeriod is dataPlaneCheckPeriod; tests inside the package shorten
	// it before the first SetDataPlaneCheck.
	checkPeriod time.Duration

	// epoch is the origin of the monotonic clock readings the Server
	// keeps (a watchdog's Beats, the check's last return), so that a Beat
	// stores a number rather than a time.Time. Only its monotonic reading
	// is used: its wall reading goes stale when the wall clock is stepped.
	// It never changes after NewServer.
	epoch time.Time

	// stackDump takes every goroutine's stack for a deadline's line
	// (runtime.Stack); a test may count or inspect the calls.
	stackDump func([]byte) int
	// dumping is held while stackDump runs, so that deadlines that pass
	// close together stop the world one after the other, never at once.
	dumping sync.Mutex

	mu              sync.Mutex
	registered      bool
	dataPlaneReady  bool
	deliveryStopped bool
	mode            DeliveryMode
	stopped         []string // subsystems stopped, each name once, in order
	check           checkVerdict
	checks          checkCounters
	poller          *poller // the current data-plane poller; nil when none is set
	watch           watchState
	changed         chan struct{} // Changed's channel; nil until someone asks
	// since is when the set of unmet conditions last changed, on the
	// monotonic clock since epoch: 0, NewServer's time, until the first
	// change (Status.Since).
	since time.Duration

	// logq holds the lines decided under mu until the log's own
	// goroutine writes them: a log sink that blocks must hold back
	// neither the answer, nor the lock, nor the caller.
	logq logQueue
}

// NewServer returns a Server for cfg, with cfg's defaults applied. A nil
// logger means slog.Default(). The new Server is not ready: registration is
// pending, and the delivery mode is streaming, because the agent's
// reconnect engine starts streaming and reports only transitions.
//
// No method waits for the logger. A line about a change of state is
// queued once the change is published, and written by a goroutine of the
// package's own (started when there is a line to write), never by the
// caller and never under the Server's lock: a logger whose handler blocks
// (stderr that nobody reads) holds back neither readiness nor any method,
// and a handler may call the Server. Lines keep their order and the time
// and source of the change; while the logger is blocked, at most 256
// wait, and past that the oldest are dropped and counted in a line
// "health: log lines dropped" written once it takes lines again. A
// handler's panic costs the line it panicked on, not the process.
func NewServer(cfg Config, logger *slog.Logger) *Server {
	cfg.ApplyDefaults()
	// Watch reads the map without a lock: a caller that changes its own
	// map later changes nothing here.
	cfg.Watchdogs = maps.Clone(cfg.Watchdogs)
	if logger == nil {
		logger = slog.Default()
	}
	s := &Server{
		cfg:         cfg,
		checkPeriod: dataPlaneCheckPeriod,
		epoch:       time.Now(),
		stackDump:   dumpAll,
		mode:        DeliveryModeStreaming,
		logq:        logQueue{logger: logger},
	}
	unmet := s.unmet()
	s.verdict.Store(newVerdict(unmet, s.detail(unmet.first()), false))
	return s
}

// contextOrBackground lets a nil context mean "no deadline" rather than a
// panic deep in the context package.
func contextOrBackground(ctx context.Context) context.Context {
	if ctx == nil {
		return context.Background()
	}
	return ctx
}

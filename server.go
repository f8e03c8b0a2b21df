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

// Server holds the readiness state and serves the probes; create it with
// NewServer. Its methods are safe for concurrent use, in any order.
type Server struct {
	cfg Config // as NewServer made it; never changed

	// verdict is what a probe reads: one atomic load, whatever the rate
	// of probes. It is replaced, under mu, only when the state changes
	// (update).
	verdict atomic.Pointer[verdict]

	// probes and conns are counted with atomics, outside mu, so that
	// counting takes no lock on the probe path or in Serve.
	probes probeCounters
	conns  listener.Counters

	// checkPeriod is dataPlaneCheckPeriod; tests inside the package shorten
	// it before the first SetDataPlaneCheck.
	checkPeriod time.Duration

	// clock is where the Server reads the time and arms its timers
	// (see clock); never changed.
	clock clock
	// epoch is the origin of the monotonic clock readings the Server
	// keeps (a watchdog's Beats, the check's last return), so that a Beat
	// stores a number rather than a time.Time. Only its monotonic reading
	// is used: its wall reading goes stale when the wall clock is stepped.
	// It never changes after NewServer.
	epoch time.Time

	// stackq holds the stacks still to be taken (a deadline's, a
	// stall's), and takes them.
	stackq stackQueue

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
	overrides       map[string]Duration // the watchdog timeouts in force by name: Config.Watchdogs, then SetWatchdogs's
	changed         chan struct{}       // Changed's channel; nil until someone asks
	stacksDue       []wantedStack       // wanted by the ERROR lines queued under mu; unlock has them taken
	// since is when the set of unmet conditions last changed, on the
	// monotonic clock since epoch: 0, NewServer's time, until the first
	// change (Status.Since).
	since time.Duration
	// unreadySince is when readiness was last lost, on the same clock: 0
	// until the first time, as a new Server is not ready. everReady is
	// set once readiness first turns ready.
	unreadySince time.Duration
	everReady    bool

	// logq carries every line to the logger (see logQueue).
	logq logQueue
}

// NewServer returns a Server for cfg, defaults applied (a nil logger means
// slog.Default()). It is not ready, and its delivery mode is streaming.
//
// No method, probe or Serve waits for the logger, whose handler may call
// the Server: a goroutine of the package's writes the lines in order, with
// their calls' times and sources. While it blocks, 256 lines wait, older
// ones dropped and counted; a handler's panic costs only its line.
func NewServer(cfg Config, logger *slog.Logger) *Server {
	return newServer(cfg, logger, systemClock{})
}

// newServer is NewServer on clk, which the package's tests move by hand.
func newServer(cfg Config, logger *slog.Logger, clk clock) *Server {
	cfg.ApplyDefaults()
	if logger == nil {
		logger = slog.Default()
	}
	s := &Server{
		cfg:         cfg,
		overrides:   maps.Clone(cfg.Watchdogs), // the caller's map may change
		checkPeriod: dataPlaneCheckPeriod,
		clock:       clk,
		epoch:       clk.now(),
		stackq:      stackQueue{dumper: dumper{dump: dumpAll, clock: systemClock{}}},
		mode:        DeliveryModeStreaming, // the reconnect engine starts streaming and reports only transitions
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

// Command healthdemo is a pretend node agent that answers the kubelet's
// probes with the health package, so that you can watch them change.
//
//	go run ./cmd/healthdemo
//	curl -i http://127.0.0.1:9101/healthz
//	curl -i http://127.0.0.1:9101/readyz
//	curl -s 'http://127.0.0.1:9101/readyz?verbose'
//
// It listens at once, registers after -register-after, brings its data
// plane up -dataplane-after later and from then on checks that the network
// interface -iface exists and is up; -check-delay makes each check take
// that long, to watch "data plane check pending" and, past 15 s, "data
// plane check stalled".
//
// Its main loop, "reconcile", is watched for readiness: it beats on every
// turn and, as it waits for work that never comes, on an idle tick. Type
// hang and a pretend route sync takes the routes lock and keeps it, so
// the loop hangs on it at its next turn: -loop-timeout later /readyz says
// "subsystem unresponsive", the ERROR line's stack shows the loop waiting
// in sync.Mutex.Lock (status shows it too), and resume brings it back. Type link-down and the pretend agent's netlink
// watch reports the interface down and calls CheckNow: /readyz says "data
// plane lost" within milliseconds, not at the next 5 s check.
//
// Type commands on its standard input to drive the rest (type help);
// status prints Ready's text and the Status snapshot. Ctrl-C stops it
// cleanly.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/meshnode/health"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

const commandHelp = `commands:
  mode streaming|pull_only|degraded_polling   set the event delivery mode
  delivery-stopped                            latch: event delivery stopped
  subsystem-stopped NAME                      latch: a subsystem stopped
  hang                                        the reconcile loop hangs at its next turn
  resume                                      the hung loop turns again
  link-down                                   pretend netlink saw the interface go down; CheckNow
  link-up                                     pretend netlink saw it come back; CheckNow
  status                                      print Ready(), with its detail, and Status()
  help                                        print this list`

// run is the whole demo, apart from the process: main gives it the signals
// and the standard streams, and its test gives it a context and pipes. It
// returns the exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("healthdemo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", health.DefaultListen, "host:port of the probe endpoints")
	iface := fs.String("iface", "lo", "network interface whose presence and up state is the data-plane check")
	registerAfter := fs.Duration("register-after", 2*time.Second, "when the pretend agent registers")
	dataPlaneAfter := fs.Duration("dataplane-after", 2*time.Second, "how long after registering its data plane comes up")
	checkDelay := fs.Duration("check-delay", 0, "how long each data-plane check takes (over 15s, it stalls)")
	loopTimeout := fs.Duration("loop-timeout", 5*time.Second, "the reconcile loop's watchdog timeout")
	var level slog.Level
	fs.TextVar(&level, "log-level", slog.LevelInfo, "log level: debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	out := &lockedWriter{w: stdout}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	cfg := health.Config{Listen: *listen}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(stderr, "healthdemo:", err)
		return 2
	}
	if *loopTimeout <= 0 {
		fmt.Fprintf(stderr, "healthdemo: -loop-timeout %v is not positive\n", *loopTimeout)
		return 2
	}
	srv := health.NewServer(cfg, logger)
	ln, err := srv.Listen()
	if err != nil {
		fmt.Fprintln(stderr, "healthdemo:", err)
		return 1
	}
	addr := ln.Addr().String()
	out.printf("healthdemo: serving on %s\n  curl -i http://%s/healthz\n  curl -i http://%s/readyz\n  curl -s 'http://%s/readyz?verbose'\ntype help for commands; Ctrl-C to stop\n", addr, addr, addr, addr)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	a := &agent{ctx: ctx, srv: srv, iface: *iface, loop: srv.Watch("reconcile", *loopTimeout)}
	loopEnded := make(chan struct{})
	go func() {
		defer close(loopEnded)
		a.reconcile(ctx, *loopTimeout/4)
	}()
	go startUp(ctx, srv, logger, *registerAfter, *dataPlaneAfter, slowly(ctx, *checkDelay, a.check), *iface)
	// The reader is not waited for: a read from a terminal cannot be
	// interrupted, and nothing it does outlives the process.
	go readCommands(stdin, a, out)

	err = <-served
	<-loopEnded
	if err != nil {
		fmt.Fprintln(stderr, "healthdemo:", err)
		return 1
	}
	out.printf("healthdemo: stopped cleanly\n")
	return 0
}

// startUp walks the agent's start-up on a clock a person can follow.
func startUp(ctx context.Context, srv *health.Server, logger *slog.Logger, registerAfter, dataPlaneAfter time.Duration, check func() error, iface string) {
	if !sleep(ctx, registerAfter) {
		return
	}
	logger.Info("healthdemo: registered with the control plane")
	srv.SetRegistered()
	if !sleep(ctx, dataPlaneAfter) {
		return
	}
	logger.Info("healthdemo: data plane configured; checking the interface", "iface", iface)
	// The check first, then the latch: readiness then waits for the
	// check's first verdict ("data plane check pending") and never
	// answers 200 on the latch alone.
	srv.SetDataPlaneCheck(ctx, check)
	srv.SetDataPlaneReady()
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// agent is the pretend agent's state that its commands change.
type agent struct {
	ctx   context.Context // the demo's: it ends a hang too
	srv   *health.Server
	iface string
	loop  *health.Watchdog

	linkDown atomic.Bool // what the pretend netlink watch last reported

	// routes is the lock the loop takes on every turn, as a reconcile
	// takes that of the routes it writes; turns counts the turns.
	routes sync.Mutex
	turns  int

	mu      sync.Mutex
	release chan struct{} // while hang holds routes: closed to let it go
}

// reconcile is the pretend agent's main loop. It waits for work that
// never comes, so it beats on an idle tick: waiting is not hanging. While
// hang holds the routes lock it stops turning, stuck in sync.Mutex.Lock.
func (a *agent) reconcile(ctx context.Context, idle time.Duration) {
	defer a.loop.Stop() // it ends on purpose, with the demo
	tick := time.NewTicker(idle)
	defer tick.Stop()
	for {
		a.loop.Beat()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		a.routes.Lock() // hangs while a pretend route sync holds it
		a.turns++
		a.routes.Unlock()
	}
}

// hang has a pretend route sync take the routes lock and keep it until
// resume, or the demo's end, so that the loop hangs at its next turn.
func (a *agent) hang() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.release == nil {
		release, held := make(chan struct{}), make(chan struct{})
		a.release = release
		go func() {
			a.routes.Lock()
			defer a.routes.Unlock()
			close(held)
			select {
			case <-release:
			case <-a.ctx.Done():
			}
		}()
		<-held
	}
	return "loop: reconcile hangs at its next turn, on the routes lock"
}

func (a *agent) resume() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.release != nil {
		close(a.release)
		a.release = nil
	}
	return "loop: reconcile turns again"
}

// setLink is the pretend netlink watch's handler: it records the link's
// state and asks for a check at once, then reports readiness once it has
// followed (at most a second later).
func (a *agent) setLink(down bool) string {
	changed := a.srv.Changed()
	a.linkDown.Store(down)
	a.srv.CheckNow()
	select {
	case <-changed:
	case <-time.After(time.Second):
	}
	return status(a.srv)
}

// check is the data-plane check: the interface exists and is up, and the
// pretend netlink watch has not seen it go down.
func (a *agent) check() error {
	ifi, err := net.InterfaceByName(a.iface)
	if err != nil {
		return fmt.Errorf("interface %q: %w", a.iface, err)
	}
	if ifi.Flags&net.FlagUp == 0 || a.linkDown.Load() {
		return fmt.Errorf("interface %q is down", a.iface)
	}
	return nil
}

// slowly makes check take d longer, as a slow data-plane check would. It
// stops waiting when ctx is done, so that the demo stops at once, and still
// runs the check: the poller records a result that arrives after ctx is
// done, and a made-up failure would log a readiness change on the way out.
func slowly(ctx context.Context, d time.Duration, check func() error) func() error {
	if d <= 0 {
		return check
	}
	return func() error {
		sleep(ctx, d)
		return check()
	}
}

// maxLine bounds a command line; the rest of a longer one is discarded
// rather than buffered.
const maxLine = 4096

// readCommands runs the commands read from r until it ends. Whatever it
// reads, it answers; nothing can stop the demo from serving.
func readCommands(r io.Reader, a *agent, out *lockedWriter) {
	br := bufio.NewReaderSize(r, maxLine)
	for {
		line, tooLong, err := br.ReadLine()
		if tooLong {
			for tooLong && err == nil {
				_, tooLong, err = br.ReadLine()
			}
			out.printf("error: line longer than %d bytes\n%s\n", maxLine, commandHelp)
			continue
		}
		if err != nil {
			return // end of input (no terminal, say): just keep serving
		}
		if reply := runCommand(string(line), a); reply != "" {
			out.printf("%s\n", reply)
		}
	}
}

// runCommand carries out one command line and returns the reply.
func runCommand(line string, a *agent) string {
	srv := a.srv
	verb, arg, _ := strings.Cut(strings.TrimSpace(line), " ")
	arg = strings.TrimSpace(arg)
	switch {
	case verb == "":
		return ""
	case verb == "help" && arg == "":
		return commandHelp
	case verb == "status" && arg == "":
		return status(srv) + "\n" + formatStatus(srv.Status())
	case verb == "mode" && arg != "" && !strings.Contains(arg, " "):
		srv.SetDeliveryMode(health.DeliveryMode(arg))
		return status(srv)
	case verb == "delivery-stopped" && arg == "":
		srv.SetDeliveryStopped()
		return status(srv)
	case verb == "subsystem-stopped" && arg != "":
		srv.SetSubsystemStopped(arg)
		return status(srv)
	case verb == "hang" && arg == "":
		return a.hang()
	case verb == "resume" && arg == "":
		return a.resume()
	case verb == "link-down" && arg == "":
		return a.setLink(true)
	case verb == "link-up" && arg == "":
		return a.setLink(false)
	}
	return fmt.Sprintf("error: unknown command %q\n%s", line, commandHelp)
}

func status(srv *health.Server) string {
	if err := srv.Ready(); err != nil {
		return "status: not ready: " + err.Error()
	}
	return "status: ready"
}

package health_test

import (
	"bytes"
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/health"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// This file holds the README's wiring, so that what a user copies
// compiles and runs as written: runAgent's body is the README's snippet
// (TestREADMEWiringIsRunAgent holds them together), Example_wiring runs
// it, and the names the snippet leans on are defined below as the small
// stand-ins an agent replaces with its own.

// agentConfigFile is the agent's parsed configuration file; Health is the
// section this package reads (`health:` in YAML).
type agentConfigFile struct {
	Health health.Config `yaml:"health"`
}

// agentDeliveryMode is the agent's own delivery-mode type, with the same
// values as health.DeliveryMode.
type agentDeliveryMode string

// runAgent is an agent's start-up and shutdown, as the README shows it:
// it returns once ctx, the agent's, is cancelled (SIGTERM) and Serve has
// drained, or at once with the error of a bad config or a port in use.
func runAgent(ctx context.Context, agentConfig agentConfigFile, logger *slog.Logger, mode agentDeliveryMode) error {
	cfg := agentConfig.Health // health.Config, from the agent's YAML or JSON
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return err // names the field and quotes the value
	}
	probes := health.NewServer(cfg, logger)
	ln, err := probes.Listen() // before registering: a port in use fails fast
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- probes.Serve(ctx, ln) }() // until ctx is done; with enabled: false ln is nil, and Serve returns nil at once

	// Watched before it starts: unmet until its first Beat, then whenever a turn takes longer.
	go watchedLoop(ctx, probes.Watch("reconcile", 2*time.Minute), nodeEvents, reconcileNode)

	probes.SetRegistered()                            // registered with the control plane
	probes.SetDataPlaneCheck(ctx, wgLinkIsUp)         // first the check: runs at once, then every 5 s
	probes.SetDataPlaneReady()                        // then the latch: interface and firewall chain configured
	probes.SetDeliveryMode(health.DeliveryMode(mode)) // on every mode transition
	onLinkDown(probes.CheckNow)                       // netlink saw wg0 go: check now, not at the next tick
	go removeStartupTaint(ctx, probes)                // once first ready, woken by probes.Changed()

	<-ctx.Done()    // SIGTERM: the agent drains its data plane here
	return <-served // then waits for Serve: nil once it has drained, or the listener's error
}

// nodeEvents stands for the agent's watch of its Node and peers.
var nodeEvents = make(chan string)

// reconcileNode stands for the agent's handling of one event.
func reconcileNode(string) {}

// watchedLoop is a main loop under a watchdog: it beats on every turn, and
// on an idle tick while no event comes, so that waiting is not taken for
// hanging (ExampleServer_Watch shows it hang).
func watchedLoop(ctx context.Context, wd *health.Watchdog, events <-chan string, handle func(string)) {
	defer wd.Stop() // the loop ends on purpose: no longer watched
	idle := time.NewTicker(10 * time.Second)
	defer idle.Stop()
	for {
		wd.Beat()
		select {
		case ev := <-events:
			handle(ev)
		case <-idle.C:
		case <-ctx.Done():
			return
		}
	}
}

// wgLinkIsUp stands for the agent's data-plane check: its netlink query of
// wg0 and its firewall chain (ExampleServer_CheckNow has one that fails).
func wgLinkIsUp() error { return nil }

// onLinkDown stands for the agent's netlink subscription, which calls f
// when wg0 goes down.
func onLinkDown(f func()) {}

// untainted hears from removeStartupTaint once it has seen the node
// ready, so that Example_wiring knows when to send its SIGTERM.
var untainted = make(chan struct{})

// removeStartupTaint waits for the node to be first ready, then removes
// its startup taint (ExampleServer_Changed shows the loop alone).
func removeStartupTaint(ctx context.Context, probes *health.Server) {
	for {
		ch := probes.Changed()
		if probes.Ready() == nil {
			fmt.Println("ready: removing the startup taint") // the agent patches its Node here
			untainted <- struct{}{}
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

// The README's wiring, run, with the listener and with enabled: false:
// the agent comes up, turns ready and removes its startup taint; at
// SIGTERM runAgent waits for Serve, so the drain the README promises
// happens before the agent's process would exit.
func Example_wiring() {
	disabled := false
	for _, cfg := range []health.Config{
		{Listen: "127.0.0.1:0"}, // DefaultListen when omitted
		{Enabled: &disabled},
	} {
		ctx, sigterm := context.WithCancel(context.Background())
		returned := make(chan error, 1)
		go func() {
			returned <- runAgent(ctx, agentConfigFile{Health: cfg}, slog.New(slog.NewTextHandler(io.Discard, nil)), "streaming")
		}()
		<-untainted
		sigterm()
		fmt.Println("runAgent returned:", <-returned)
	}
	// Output:
	// ready: removing the startup taint
	// runAgent returned: <nil>
	// ready: removing the startup taint
	// runAgent returned: <nil>
}

// TestREADMEWiringIsRunAgent keeps the README's wiring snippet the body of
// runAgent, which compiles and runs in Example_wiring: a user who copies
// the snippet copies code that works, with the stand-ins of this file
// replaced by the agent's own.
func TestREADMEWiringIsRunAgent(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	section := regexp.MustCompile("(?s)## Wiring it into an agent\n\n```go\n(.*?)```").FindSubmatch(readme)
	require.NotNil(t, section, "README.md's wiring section opens with a go block")

	src, err := os.ReadFile("wiring_test.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "wiring_test.go", src, 0)
	require.NoError(t, err)
	var body string
	for _, decl := range file.Decls {
		if fn, ok := decl.(*ast.FuncDecl); ok && fn.Name.Name == "runAgent" {
			// From the line after the opening brace to the line of the
			// closing one, each line one tab less indented.
			inner := src[fset.Position(fn.Body.Lbrace).Offset+2 : fset.Position(fn.Body.Rbrace).Offset]
			var b bytes.Buffer
			for _, line := range strings.SplitAfter(string(inner), "\n") {
				b.WriteString(strings.TrimPrefix(line, "\t"))
			}
			body = b.String()
		}
	}
	require.NotEmpty(t, body, "wiring_test.go has runAgent")
	assert.Equal(t, body, string(section[1]), "README.md's wiring snippet is not runAgent's body in wiring_test.go")
}

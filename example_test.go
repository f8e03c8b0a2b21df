package health_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/meshnode/health"
	"gopkg.in/yaml.v3"
)

// get is what the kubelet does: one GET on a fresh connection.
func get(url string) string {
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(url)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return fmt.Sprintf("%d %q", resp.StatusCode, body)
}

// The agent's wiring: construct from the parsed config, bind before
// registration so that a port in use fails fast, serve in a goroutine, and
// set the latches as the agent comes up.
func Example() {
	cfg := health.Config{Listen: "127.0.0.1:0"} // the agent's YAML; DefaultListen when omitted
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		fmt.Println(err)
		return
	}
	srv := health.NewServer(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ln, err := srv.Listen()
	if err != nil {
		fmt.Println(err) // e.g. the port is held by another host-networked workload
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	base := "http://" + ln.Addr().String()

	fmt.Println("liveness: ", get(base+"/healthz"))
	fmt.Println("starting: ", get(base+"/readyz"))

	srv.SetRegistered() // the node registered with the control plane
	// The check is set before SetDataPlaneReady: from then on readiness
	// waits for the check's first verdict ("data plane check pending"),
	// so the node never answers 200 on the latch alone.
	srv.SetDataPlaneCheck(ctx, func() error { return nil }) // e.g. the wg0 link is up
	srv.SetDataPlaneReady()
	// An agent goes on at once; this example waits for the first verdict
	// only so that its output is fixed.
	for errors.Is(srv.Ready(), health.ErrDataPlaneCheckPending) {
		time.Sleep(time.Millisecond)
	}
	fmt.Println("up:       ", get(base+"/readyz"))

	srv.SetDeliveryMode(health.DeliveryMode("degraded_polling")) // from the agent's own mode type
	fmt.Println("degraded: ", get(base+"/readyz"))
	fmt.Println("liveness: ", get(base+"/healthz"))

	stop()
	fmt.Println("Serve returned:", <-served)
	// Output:
	// liveness:  200 "ok\n"
	// starting:  503 "not ready: registration pending\n"
	// up:        200 "ok\n"
	// degraded:  503 "not ready: event delivery degraded\n"
	// liveness:  200 "ok\n"
	// Serve returned: <nil>
}

// Ready gives the agent's own, authenticated surfaces the detail that the
// probe body never carries.
func ExampleServer_Ready() {
	srv := health.NewServer(health.Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	srv.SetRegistered()
	srv.SetDataPlaneReady()
	srv.SetSubsystemStopped("route-sync")

	err := srv.Ready()
	fmt.Println(err)
	fmt.Println(errors.Is(err, health.ErrSubsystemStopped))
	// Output:
	// subsystem stopped: "route-sync"
	// true
}

// An agent whose check takes a while (it pings the mesh peers, say) sets
// it before SetDataPlaneReady, so that readiness goes from "data plane not
// configured" to "data plane check pending" to ready, and never passes
// through 200 before the check has vouched for the data plane.
func ExampleServer_SetDataPlaneCheck() {
	srv := health.NewServer(health.Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // stops the poller
	peersAnswered := make(chan struct{})
	pingPeers := func() error {
		<-peersAnswered // stands for the round trips to the mesh peers
		return nil
	}

	srv.SetRegistered()
	srv.SetDataPlaneCheck(ctx, pingPeers)
	fmt.Println(srv.Ready())
	srv.SetDataPlaneReady() // the interface and firewall chain are configured
	fmt.Println(srv.Ready())
	close(peersAnswered)
	for errors.Is(srv.Ready(), health.ErrDataPlaneCheckPending) {
		time.Sleep(time.Millisecond) // the first check's verdict is on its way
	}
	fmt.Println(srv.Ready())
	// Output:
	// data plane not configured
	// data plane check pending
	// <nil>
}

// A person debugging a node with curl asks /readyz?verbose for every
// condition at once, in the Kubernetes API server's format; plain /readyz
// names only the first unmet one. Neither carries a name or an error.
func ExampleServer_Handler_verbose() {
	srv := health.NewServer(health.Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	srv.SetRegistered()
	srv.SetDataPlaneReady()
	srv.SetDeliveryStopped()
	srv.SetSubsystemStopped("route-sync")

	for _, target := range []string{"/readyz", "/readyz?verbose"} {
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
		fmt.Printf("%s: %d\n%s", target, rec.Code, rec.Body)
	}
	// Output:
	// /readyz: 503
	// not ready: event delivery stopped
	// /readyz?verbose: 503
	// [+]registration ok
	// [+]data-plane ok
	// [-]event-delivery failed: event delivery stopped
	// [-]subsystems failed: subsystem stopped
	// readyz check failed
}

// An agent that serves its metrics without the Prometheus client reads
// Status at scrape time, on its own metrics endpoint (never on the
// unauthenticated probe port), and writes it in the Prometheus text
// format. Conditions lists every readiness condition, so each gets a
// series, met or not, and a condition added to the package shows up with
// no table to edit. The names are those of the healthprom module's
// collector, which also writes the watchdogs and the stopped subsystems'
// names (label values that need escaping). Unlike Ready, Status lists
// every unmet condition: the stopped subsystem shows behind degraded
// delivery.
func ExampleServer_Status() {
	srv := health.NewServer(health.Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	srv.SetRegistered()
	srv.SetDataPlaneReady()
	srv.SetDeliveryMode(health.DeliveryModeDegradedPolling)
	srv.SetSubsystemStopped("route-sync")
	for _, target := range []string{"/healthz", "/readyz", "/readyz?verbose", "/metrics"} {
		srv.Handler().ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, target, nil))
	}

	metricsMux := http.NewServeMux()
	metricsMux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		st := srv.Status() // once, so that every line comes from one snapshot
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		family := func(name, typ, help string) {
			fmt.Fprintf(w, "# HELP health_%s %s\n# TYPE health_%s %s\n", name, help, name, typ)
		}
		one := func(b bool) float64 {
			if b {
				return 1
			}
			return 0
		}
		unixSeconds := func(t time.Time) float64 {
			if t.IsZero() {
				return 0
			}
			return float64(t.Unix()) + float64(t.Nanosecond())/1e9
		}

		family("ready", "gauge", "Whether the node is ready: 1 when /readyz answers 200, 0 when it answers 503.")
		fmt.Fprintf(w, "health_ready %g\n", one(len(st.Unmet) == 0))
		family("condition_unmet", "gauge", "Whether a readiness condition is unmet (1) or met (0), one series per condition of the readiness table.")
		for _, cond := range health.Conditions() {
			label := strings.ReplaceAll(cond.Error(), " ", "_") // lower-case words: nothing to escape
			fmt.Fprintf(w, "health_condition_unmet{condition=\"%s\"} %g\n", label, one(slices.Contains(st.Unmet, cond)))
		}
		for _, m := range []struct {
			name, typ, help string
			value           float64
		}{
			{"check_installed", "gauge", "Whether a data-plane check is set (1) or not (0).", one(st.Check.Installed)},
			{"check_runs_total", "counter", "Data-plane checks that returned, failures, panics and calls of runtime.Goexit included.", float64(st.Check.Runs)},
			{"check_failures_total", "counter", "Data-plane checks that returned an error, panicked or called runtime.Goexit.", float64(st.Check.Failures)},
			{"check_panics_total", "counter", "Data-plane checks that panicked.", float64(st.Check.Panics)},
			{"check_stalls_total", "counter", "Data-plane checks that ran past the stall bound (three check periods).", float64(st.Check.Stalls)},
			{"check_last_duration_seconds", "gauge", "How long the last returned data-plane check ran.", st.Check.LastDuration.Seconds()},
			{"check_last_return_timestamp_seconds", "gauge", "When the last data-plane check returned, in seconds since the Unix epoch; 0 before the first.", unixSeconds(st.Check.LastReturned)},
			{"connections_held", "gauge", "Connections the probe listener holds now.", float64(st.Conns.Held)},
			{"connections_limit", "gauge", "The bound on the connections the probe listener holds; 0 while Serve is not running.", float64(st.Conns.Limit)},
			{"connections_accepted_total", "counter", "Connections the probe listener accepted.", float64(st.Conns.Accepted)},
			{"connections_evicted_total", "counter", "Connections the probe listener closed to make room, before they sent a request: a local flood's signature.", float64(st.Conns.Evicted)},
			{"connections_pressure", "gauge", "Whether the probe listener is evicting connections to make room (1) or not (0).", one(st.Conns.Pressure)},
		} {
			family(m.name, m.typ, m.help)
			fmt.Fprintf(w, "health_%s %g\n", m.name, m.value)
		}
		family("probes_total", "counter", "Answers of the probe handler, by answer: healthz_ok, readyz_ok, readyz_not_ready, and other for 404 and 405.")
		fmt.Fprintf(w, "health_probes_total{answer=\"healthz_ok\"} %d\n", st.Probes.Liveness)
		fmt.Fprintf(w, "health_probes_total{answer=\"readyz_ok\"} %d\n", st.Probes.ReadyOK)
		fmt.Fprintf(w, "health_probes_total{answer=\"readyz_not_ready\"} %d\n", st.Probes.ReadyNotReady)
		fmt.Fprintf(w, "health_probes_total{answer=\"other\"} %d\n", st.Probes.Other)
	})

	rec := httptest.NewRecorder()
	metricsMux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	fmt.Print(rec.Body)
	// Output:
	// # HELP health_ready Whether the node is ready: 1 when /readyz answers 200, 0 when it answers 503.
	// # TYPE health_ready gauge
	// health_ready 0
	// # HELP health_condition_unmet Whether a readiness condition is unmet (1) or met (0), one series per condition of the readiness table.
	// # TYPE health_condition_unmet gauge
	// health_condition_unmet{condition="registration_pending"} 0
	// health_condition_unmet{condition="data_plane_not_configured"} 0
	// health_condition_unmet{condition="data_plane_check_pending"} 0
	// health_condition_unmet{condition="data_plane_lost"} 0
	// health_condition_unmet{condition="data_plane_check_stalled"} 0
	// health_condition_unmet{condition="event_delivery_stopped"} 0
	// health_condition_unmet{condition="event_delivery_degraded"} 1
	// health_condition_unmet{condition="subsystem_stopped"} 1
	// health_condition_unmet{condition="subsystem_unresponsive"} 0
	// # HELP health_check_installed Whether a data-plane check is set (1) or not (0).
	// # TYPE health_check_installed gauge
	// health_check_installed 0
	// # HELP health_check_runs_total Data-plane checks that returned, failures, panics and calls of runtime.Goexit included.
	// # TYPE health_check_runs_total counter
	// health_check_runs_total 0
	// # HELP health_check_failures_total Data-plane checks that returned an error, panicked or called runtime.Goexit.
	// # TYPE health_check_failures_total counter
	// health_check_failures_total 0
	// # HELP health_check_panics_total Data-plane checks that panicked.
	// # TYPE health_check_panics_total counter
	// health_check_panics_total 0
	// # HELP health_check_stalls_total Data-plane checks that ran past the stall bound (three check periods).
	// # TYPE health_check_stalls_total counter
	// health_check_stalls_total 0
	// # HELP health_check_last_duration_seconds How long the last returned data-plane check ran.
	// # TYPE health_check_last_duration_seconds gauge
	// health_check_last_duration_seconds 0
	// # HELP health_check_last_return_timestamp_seconds When the last data-plane check returned, in seconds since the Unix epoch; 0 before the first.
	// # TYPE health_check_last_return_timestamp_seconds gauge
	// health_check_last_return_timestamp_seconds 0
	// # HELP health_connections_held Connections the probe listener holds now.
	// # TYPE health_connections_held gauge
	// health_connections_held 0
	// # HELP health_connections_limit The bound on the connections the probe listener holds; 0 while Serve is not running.
	// # TYPE health_connections_limit gauge
	// health_connections_limit 0
	// # HELP health_connections_accepted_total Connections the probe listener accepted.
	// # TYPE health_connections_accepted_total counter
	// health_connections_accepted_total 0
	// # HELP health_connections_evicted_total Connections the probe listener closed to make room, before they sent a request: a local flood's signature.
	// # TYPE health_connections_evicted_total counter
	// health_connections_evicted_total 0
	// # HELP health_connections_pressure Whether the probe listener is evicting connections to make room (1) or not (0).
	// # TYPE health_connections_pressure gauge
	// health_connections_pressure 0
	// # HELP health_probes_total Answers of the probe handler, by answer: healthz_ok, readyz_ok, readyz_not_ready, and other for 404 and 405.
	// # TYPE health_probes_total counter
	// health_probes_total{answer="healthz_ok"} 1
	// health_probes_total{answer="readyz_ok"} 0
	// health_probes_total{answer="readyz_not_ready"} 2
	// health_probes_total{answer="other"} 1
}

// waitUntil returns Ready's error once done says it is the one awaited,
// woken by every change of readiness rather than polling it.
func waitUntil(srv *health.Server, done func(error) bool) error {
	for {
		ch := srv.Changed()
		if err := srv.Ready(); done(err) {
			return err
		}
		<-ch
	}
}

// A loop watched for readiness beats on every turn, and on an idle tick
// while it waits for events, so that a quiet spell is not mistaken for a
// hang. When it hangs (here on a lock that is never released) it stops
// beating, and once its timeout has passed the node is not ready until it
// turns again; liveness stays 200 throughout.
func ExampleServer_Watch() {
	srv := health.NewServer(health.Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	srv.SetRegistered()
	srv.SetDataPlaneReady()
	ctx, cancel := context.WithCancel(context.Background())

	// An agent's timeout is minutes; this one is short so that the
	// example runs in a moment.
	const timeout = 200 * time.Millisecond
	reconcile := srv.Watch("reconcile", timeout) // before the loop starts
	fmt.Println("watched:", srv.Ready())

	events := make(chan string)
	lock := make(chan struct{}) // stands for a lock someone forgot to release
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer reconcile.Stop() // the loop ends on purpose: no longer watched
		idle := time.NewTicker(timeout / 4)
		defer idle.Stop()
		for {
			reconcile.Beat()
			select {
			case ev := <-events:
				if ev == "needs the lock" {
					<-lock // hangs
				}
			case <-idle.C: // nothing to do: waiting is not hanging
			case <-ctx.Done():
				return
			}
		}
	}()

	isUnresponsive := func(err error) bool { return errors.Is(err, health.ErrSubsystemUnresponsive) }
	fmt.Println("turning:", waitUntil(srv, func(err error) bool { return err == nil }))
	events <- "needs the lock"
	fmt.Println("hung:", waitUntil(srv, isUnresponsive))
	close(lock)
	fmt.Println("turning again:", waitUntil(srv, func(err error) bool { return err == nil }))
	cancel()
	<-done
	fmt.Println("stopped:", srv.Ready())
	// Output:
	// watched: subsystem unresponsive: "reconcile" (no beat yet, timeout 200ms)
	// turning: <nil>
	// hung: subsystem unresponsive: "reconcile" (no beat within 200ms)
	// turning again: <nil>
	// stopped: <nil>
}

// The agent removes the node's startup taint the moment the node is first
// ready, rather than polling Ready: the loop wakes at every change of
// readiness and never misses one.
func ExampleServer_Changed() {
	srv := health.NewServer(health.Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	untainted := make(chan struct{})
	go func() {
		defer close(untainted)
		for {
			ch := srv.Changed()
			if srv.Ready() == nil {
				fmt.Println("ready: removing the startup taint") // the agent patches its Node here
				return
			}
			select {
			case <-ch:
			case <-ctx.Done():
				return
			}
		}
	}()

	fmt.Println("starting:", srv.Ready())
	srv.SetRegistered()
	srv.SetDataPlaneReady()
	<-untainted
	// Output:
	// starting: registration pending
	// ready: removing the startup taint
}

// The agent's netlink watch sees the WireGuard link go down and asks for a
// check at once: readiness follows in milliseconds, not at the next tick
// of the 5 s period.
func ExampleServer_CheckNow() {
	srv := health.NewServer(health.Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var linkUp atomic.Bool // what the pretend netlink reports
	linkUp.Store(true)
	srv.SetRegistered()
	srv.SetDataPlaneCheck(ctx, func() error {
		if !linkUp.Load() {
			return errors.New("wg0 is down")
		}
		return nil
	})
	srv.SetDataPlaneReady()
	fmt.Println("up:", waitUntil(srv, func(err error) bool { return err == nil }))

	// The netlink watch's handler for a link-down event:
	linkUp.Store(false)
	srv.CheckNow()

	fmt.Println("down:", waitUntil(srv, func(err error) bool { return err != nil }))
	// Output:
	// up: <nil>
	// down: data plane lost: wg0 is down
}

func ExampleConfig_Validate() {
	cfg := health.Config{Listen: "127.0.0.1:99999"}
	fmt.Println(cfg.Validate())
	// Output:
	// health: listen "127.0.0.1:99999": port "99999" is not a number from 0 to 65535
}

// The operator retunes watchdogs in the agent's YAML, without a release:
// reconcile is slow on this node, and peer-watch is off until a fix
// ships. A Watch the config names gets the config's timeout (0: disabled,
// never unmet); the others keep the code's. A value that is not a Go
// duration is a decode error that quotes it.
func ExampleConfig_watchdogs() {
	var agentConfig struct {
		Health health.Config `yaml:"health"`
	}
	doc := "health:\n  watchdogs:\n    reconcile: 10m\n    peer-watch: 0\n"
	if err := yaml.Unmarshal([]byte(doc), &agentConfig); err != nil {
		fmt.Println(err)
		return
	}
	cfg := agentConfig.Health
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		fmt.Println(err)
		return
	}
	srv := health.NewServer(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for _, w := range []*health.Watchdog{
		srv.Watch("reconcile", 2*time.Minute),
		srv.Watch("peer-watch", 2*time.Minute),
		srv.Watch("gc", time.Minute),
	} {
		defer w.Stop()
	}
	for _, w := range srv.Status().Watchdogs {
		fmt.Printf("%s: timeout %v, unmet %v\n", w.Name, w.Timeout, w.Overdue)
	}

	fmt.Println(yaml.Unmarshal([]byte("health:\n  watchdogs: {reconcile: 600}\n"), &agentConfig))
	// Output:
	// reconcile: timeout 10m0s, unmet true
	// peer-watch: timeout 0s, unmet false
	// gc: timeout 1m0s, unmet true
	// health: watchdog timeout "600" is not a duration: write a number and a unit, such as "90s", "10m" or "1h30m", or 0 to disable the watchdog
}

// The agent passes its ConfigMap's watchdogs to SetWatchdogs when the
// ConfigMap changes. The map replaces the whole set of overrides, as the
// ConfigMap replaces the config: a name it leaves out is not kept at its
// last override but goes back to the code's timeout (logged as such).
// Here the operator drops reconcile's 10m and switches peer-watch back on
// at 5m.
func ExampleServer_SetWatchdogs() {
	srv := health.NewServer(health.Config{Watchdogs: map[string]health.Duration{
		"reconcile":  health.Duration(10 * time.Minute),
		"peer-watch": 0,
	}}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for _, w := range []*health.Watchdog{
		srv.Watch("reconcile", 2*time.Minute),
		srv.Watch("peer-watch", time.Minute),
	} {
		defer w.Stop()
	}
	show := func(when string) {
		for _, w := range srv.Status().Watchdogs {
			fmt.Printf("%s: %s timeout %v\n", when, w.Name, w.Timeout)
		}
	}
	show("at start")

	if err := srv.SetWatchdogs(map[string]health.Duration{"peer-watch": health.Duration(5 * time.Minute)}); err != nil {
		fmt.Println(err)
		return
	}
	show("reloaded")
	// Output:
	// at start: reconcile timeout 10m0s
	// at start: peer-watch timeout 0s
	// reloaded: reconcile timeout 2m0s
	// reloaded: peer-watch timeout 5m0s
}

package health_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/meshnode/health"
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
	srv.SetDataPlaneReady()
	srv.SetDataPlaneCheck(ctx, func() error { return nil }) // e.g. the wg0 link is up
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

func ExampleConfig_Validate() {
	cfg := health.Config{Listen: "127.0.0.1:99999"}
	fmt.Println(cfg.Validate())
	// Output:
	// health: listen "127.0.0.1:99999": port "99999" is not a number from 0 to 65535
}

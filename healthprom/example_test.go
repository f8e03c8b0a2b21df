package healthprom_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/meshnode/health"
	"github.com/meshnode/health/healthprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The agent registers the collector with its own registry and serves it
// on its metrics endpoint, never on the unauthenticated probe port. This
// example scrapes it once and prints what an operator looks at first:
// readiness, the conditions that are unmet, and the subsystems stopped.
func ExampleNewCollector() {
	probes := health.NewServer(health.Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	probes.SetRegistered()
	probes.SetDataPlaneReady()
	probes.SetSubsystemStopped("route-sync")

	reg := prometheus.NewRegistry()
	reg.MustRegister(healthprom.NewCollector(probes))
	metricsMux := http.NewServeMux()
	metricsMux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	rec := httptest.NewRecorder()
	metricsMux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for line := range strings.Lines(rec.Body.String()) {
		switch {
		case strings.HasPrefix(line, "health_ready "),
			strings.HasPrefix(line, "health_condition_unmet{") && strings.HasSuffix(line, "} 1\n"),
			strings.HasPrefix(line, "health_subsystem_stopped{"):
			fmt.Print(line)
		}
	}
	// Output:
	// health_condition_unmet{condition="subsystem_stopped"} 1
	// health_ready 0
	// health_subsystem_stopped{subsystem="route-sync"} 1
}

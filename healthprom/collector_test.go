package healthprom

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/health"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestMain fails the run if any goroutine outlives the tests: a check's
// poller must end with its ctx.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newServer() *health.Server {
	return health.NewServer(health.Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// scrape gathers c through a pedantic registry, which fails a scrape
// whose series do not match Describe or repeat one another. It checks the
// condition family against the health package's own list, not a copy: one
// series per health.Conditions(), 1 for those in unmet and 0 for the rest,
// so that a condition added to health needs no edit here. It returns the
// other families, for a golden exposition.
func scrape(t *testing.T, c prometheus.Collector, unmet ...error) []*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	families, err := reg.Gather()
	require.NoError(t, err)

	want := map[string]float64{}
	for _, err := range health.Conditions() {
		want[strings.ReplaceAll(err.Error(), " ", "_")] = 0
	}
	for _, err := range unmet {
		want[strings.ReplaceAll(err.Error(), " ", "_")] = 1
	}
	got := map[string]float64{}
	var rest []*dto.MetricFamily
	for _, mf := range families {
		if !strings.HasSuffix(mf.GetName(), "_condition_unmet") {
			rest = append(rest, mf)
			continue
		}
		assert.Equal(t, dto.MetricType_GAUGE, mf.GetType())
		for _, m := range mf.GetMetric() {
			for _, label := range m.GetLabel() {
				if label.GetName() == "condition" {
					got[label.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	assert.Equal(t, want, got, "the condition series, with %v unmet", unmet)
	return rest
}

// assertGolden compares families with testdata/name.prom, an exposition in
// the Prometheus text format written by hand from the state the test sets
// up, less the condition family, which scrape checks.
func assertGolden(t *testing.T, families []*dto.MetricFamily, name string) {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name+".prom"))
	require.NoError(t, err)
	defer f.Close()
	gathered := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return families, nil })
	require.NoError(t, testutil.GatherAndCompare(gathered, f))
}

// probe serves one request through the probe handler, as the kubelet's
// probe reaches it.
func probe(s *health.Server, method, target string) {
	s.Handler().ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(method, target, nil))
}

// takeGauge removes the family name from families and returns its one
// gauge's value, for a value the test holds to bounds rather than to a
// golden exposition.
func takeGauge(t *testing.T, families []*dto.MetricFamily, name string) (float64, []*dto.MetricFamily) {
	t.Helper()
	for i, mf := range families {
		if mf.GetName() == name {
			require.Len(t, mf.GetMetric(), 1, name)
			return mf.GetMetric()[0].GetGauge().GetValue(), append(families[:i:i], families[i+1:]...)
		}
	}
	t.Fatalf("no family %s", name)
	return 0, nil
}

func TestNewServer(t *testing.T) {
	before := time.Now()
	s := newServer()
	after := time.Now()
	c := NewCollector(s)
	since, rest := takeGauge(t, scrape(t, c, health.ErrRegistrationPending, health.ErrDataPlanePending),
		"health_readiness_last_change_timestamp_seconds")
	assert.GreaterOrEqual(t, since, unixSeconds(before)-0.001, "NewServer's time, until the first change")
	assert.LessOrEqual(t, since, unixSeconds(after)+0.001)
	assertGolden(t, rest, "new_server")
	problems, err := testutil.CollectAndLint(c)
	require.NoError(t, err)
	assert.Empty(t, problems)
}

// TestReadyWithACheck scrapes a real server whose check has passed. The
// check's duration and return time are real, so they are held to bounds,
// and everything else to the golden exposition.
func TestReadyWithACheck(t *testing.T) {
	s := newServer()
	s.SetRegistered()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	before := time.Now()
	s.SetDataPlaneCheck(ctx, func() error { return nil })
	s.SetDataPlaneReady()
	require.Eventually(t, func() bool { return s.Ready() == nil }, 10*time.Second, time.Millisecond, "the check passes")
	after := time.Now()
	for _, target := range []string{"/healthz", "/healthz", "/readyz", "/readyz?verbose", "/metrics"} {
		probe(s, http.MethodGet, target)
	}
	probe(s, http.MethodPost, "/readyz")

	families := scrape(t, NewCollector(s))
	since, families := takeGauge(t, families, "health_readiness_last_change_timestamp_seconds")
	assert.GreaterOrEqual(t, since, unixSeconds(before), "the check's pass made it ready")
	assert.LessOrEqual(t, since, unixSeconds(after))
	var rest []*dto.MetricFamily
	for _, mf := range families {
		switch mf.GetName() {
		case "health_check_last_duration_seconds":
			v := mf.GetMetric()[0].GetGauge().GetValue()
			assert.Positive(t, v)
			assert.LessOrEqual(t, v, after.Sub(before).Seconds())
		case "health_check_last_return_timestamp_seconds":
			v := mf.GetMetric()[0].GetGauge().GetValue()
			assert.GreaterOrEqual(t, v, unixSeconds(before))
			assert.LessOrEqual(t, v, unixSeconds(after))
		default:
			rest = append(rest, mf)
		}
	}
	assert.Len(t, rest, len(families)-2, "both timing families are there")
	assertGolden(t, rest, "ready_with_a_check")
}

// TestFailedCheckAndStoppedSubsystems scrapes a real server whose check
// fails, with subsystems stopped, and compares the families that state
// decides.
func TestFailedCheckAndStoppedSubsystems(t *testing.T) {
	s := newServer()
	s.SetRegistered()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.SetDataPlaneCheck(ctx, func() error { return errors.New("wg0: link down") })
	s.SetDataPlaneReady()
	s.SetSubsystemStopped("route-sync")
	s.SetSubsystemStopped("peer-gc")
	s.SetSubsystemStopped("route-sync")
	require.Eventually(t, func() bool { return errors.Is(s.Ready(), health.ErrDataPlaneLost) }, 10*time.Second,
		time.Millisecond, "the check fails")
	cancel()

	families := scrape(t, NewCollector(s), health.ErrDataPlaneLost, health.ErrSubsystemStopped)
	gathered := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return families, nil })
	require.NoError(t, testutil.GatherAndCompare(gathered, strings.NewReader(`
# HELP health_ready Whether the node is ready: 1 when /readyz answers 200, 0 when it answers 503.
# TYPE health_ready gauge
health_ready 0
# HELP health_subsystem_stopped 1 for each subsystem named by SetSubsystemStopped: a latch, which only a restart clears.
# TYPE health_subsystem_stopped gauge
health_subsystem_stopped{subsystem="route-sync"} 1
health_subsystem_stopped{subsystem="peer-gc"} 1
# HELP health_check_installed Whether a data-plane check is set (1) or not (0).
# TYPE health_check_installed gauge
health_check_installed 1
# HELP health_check_panics_total Data-plane checks that panicked.
# TYPE health_check_panics_total counter
health_check_panics_total 0
`), "health_ready", "health_subsystem_stopped", "health_check_installed", "health_check_panics_total"))

	series := gather(t, NewCollector(s))
	runs := series["health_check_runs_total"][0].GetCounter().GetValue()
	assert.GreaterOrEqual(t, runs, 1.0)
	assert.Equal(t, runs, series["health_check_failures_total"][0].GetCounter().GetValue(), "every run failed")
}

var (
	// t0 is a fixed time with a fraction of a second, so that a golden
	// exposition shows that timestamps keep it.
	t0         = time.Date(2025, 3, 1, 12, 0, 0, 250_000_000, time.UTC)
	everyField = health.Status{
		Unmet: []error{health.ErrDataPlaneLost, health.ErrSubsystemStopped},
		Check: health.CheckStatus{
			Installed:    true,
			Runs:         7,
			Failures:     3,
			Panics:       1,
			Stalls:       2,
			LastDuration: 1500 * time.Millisecond,
			LastReturned: t0,
			LastError:    errors.New("wg0: link down"),
		},
		Conns:  health.ConnStatus{Held: 3, Limit: 256, Accepted: 40, Evicted: 7, Pressure: true},
		Probes: health.ProbeCounts{Liveness: 11, ReadyOK: 5, ReadyNotReady: 6, Other: 2},
		Watchdogs: []health.WatchdogStatus{
			{Name: "reconcile", Timeout: time.Minute, Beats: 12, LastBeat: t0.Add(-time.Second)},
			{Name: "peer-sync", Timeout: 10 * time.Second, Beats: 4, LastBeat: t0.Add(-20 * time.Second), Overdue: true, Timeouts: 1},
			{Name: "peer-sync", Timeout: 5 * time.Second, Beats: 6, LastBeat: t0.Add(-2 * time.Second), Timeouts: 2},
			{Name: "watch", Timeout: 30 * time.Second, Overdue: true, Timeouts: 1},
			{Name: "watch", Timeout: 30 * time.Second, Beats: 9, LastBeat: t0},
			{Name: "bad\xffname", Timeout: 1500 * time.Millisecond, Beats: 1, LastBeat: t0},
			{Name: "resync", Timeout: 0, Beats: 3, LastBeat: t0}, // disabled by the config
		},
		// What the watchdogs above count, with what stopped ones counted:
		// a peer-sync (25 beats, a timeout), a gc loop whose watchdogs
		// all stopped, and a name that makes the same label as bad\xffname.
		WatchdogTotals: []health.WatchdogTotals{
			{Name: "reconcile", Beats: 12},
			{Name: "peer-sync", Beats: 35, Timeouts: 4},
			{Name: "gc", Beats: 30, Timeouts: 2},
			{Name: "watch", Beats: 9, Timeouts: 1},
			{Name: "bad\xffname", Beats: 1},
			{Name: "bad\uFFFDname", Beats: 5},
			{Name: "resync", Beats: 3},
		},
		// Names are the agent's: one holds a byte that is not UTF-8, and
		// one is what it becomes once made valid.
		Stopped: []string{"route-sync", "bad\xffname", "bad\uFFFDname", ""},
		Since:   t0.Add(-90 * time.Second),
	}
)

// TestEveryField scrapes a Status with every field set, through the
// collector NewCollector builds around Server.Status: a failed check,
// stopped subsystems, connections under a flood, and watchdogs whose
// names repeat, one of them never beaten.
func TestEveryField(t *testing.T) {
	c := newCollector(func() health.Status { return everyField }, options{namespace: DefaultNamespace})
	assertGolden(t, scrape(t, c, everyField.Unmet...), "every_field")
	problems, err := testutil.CollectAndLint(c)
	require.NoError(t, err)
	assert.Empty(t, problems)
}

// TestConditionsFollowHealth checks the condition series against the
// health package's own list, not a copy: a condition added there shows
// here, as a series that reads 1 exactly when Status lists it.
func TestConditionsFollowHealth(t *testing.T) {
	conditions := health.Conditions()
	require.NotEmpty(t, conditions)
	for _, unmet := range conditions {
		c := newCollector(func() health.Status { return health.Status{Unmet: []error{unmet}} },
			options{namespace: DefaultNamespace})
		scrape(t, c, unmet)
	}
	scrape(t, newCollector(func() health.Status { return health.Status{Unmet: conditions} },
		options{namespace: DefaultNamespace}), conditions...)
}

// gather collects c through a pedantic registry and returns its series by
// family name.
func gather(t *testing.T, c prometheus.Collector) map[string][]*dto.Metric {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	families, err := reg.Gather()
	require.NoError(t, err)
	byName := map[string][]*dto.Metric{}
	for _, mf := range families {
		byName[mf.GetName()] = mf.GetMetric()
	}
	return byName
}

func TestReadsStatusOncePerScrape(t *testing.T) {
	s := newServer()
	calls := 0
	c := newCollector(func() health.Status { calls++; return s.Status() }, options{namespace: DefaultNamespace})
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	calls = 0
	_, err := reg.Gather()
	require.NoError(t, err)
	assert.Equal(t, 1, calls)
}

func TestOptions(t *testing.T) {
	s := newServer()
	t.Run("namespace", func(t *testing.T) {
		names := gather(t, NewCollector(s, WithNamespace("meshagent")))
		assert.Contains(t, names, "meshagent_ready")
		assert.Contains(t, names, "meshagent_probes_total")
		for name := range names {
			assert.True(t, strings.HasPrefix(name, "meshagent_"), name)
		}
	})
	t.Run("no namespace", func(t *testing.T) {
		names := gather(t, NewCollector(s, WithNamespace("")))
		assert.Contains(t, names, "ready")
		assert.Contains(t, names, "check_runs_total")
	})
	t.Run("const labels", func(t *testing.T) {
		labels := prometheus.Labels{"node": "node-a"}
		c := NewCollector(s, WithConstLabels(labels))
		labels["node"] = "changed after NewCollector"
		for name, metrics := range gather(t, c) {
			for _, m := range metrics {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				assert.Equal(t, "node-a", labels["node"], name)
			}
		}
	})
	for _, tc := range []struct {
		name string
		opt  Option
		err  string
	}{
		{"namespace with a dash", WithNamespace("mesh-agent"),
			`healthprom: namespace "mesh-agent" is not a metric name prefix: letters, digits and underscores, not starting with a digit`},
		{"namespace starting with a digit", WithNamespace("1agent"), `healthprom: namespace "1agent"`},
		{"const label named like a variable one", WithConstLabels(prometheus.Labels{"condition": "x"}),
			`duplicate label names in constant and variable labels for metric "health_condition_unmet"`},
		{"const label value not UTF-8", WithConstLabels(prometheus.Labels{"node": "\xff"}), `label value "\xff" is not valid UTF-8`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCollector(s, tc.opt)
			err := prometheus.NewRegistry().Register(c)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.err)
			_, err = testutil.CollectAndLint(c)
			assert.Error(t, err, "Collect reports it too, rather than panicking")
		})
	}
}

func TestNewCollectorOfNil(t *testing.T) {
	assert.PanicsWithValue(t, "healthprom: NewCollector of a nil *health.Server", func() { NewCollector(nil) })
}

// TestOpenMetricsScrape scrapes through promhttp over a real connection
// with OpenMetrics negotiated, as Prometheus does, and checks that every
// family comes before the closing "# EOF", where plain text written next
// to a registry would land after it.
func TestOpenMetricsScrape(t *testing.T) {
	s := newServer()
	s.SetRegistered()
	s.SetDataPlaneReady()
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(s))
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true}))
	defer srv.Close()

	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	assert.True(t, strings.HasPrefix(resp.Header.Get("Content-Type"), "application/openmetrics-text; version=1.0.0"),
		resp.Header.Get("Content-Type"))

	text := string(body)
	require.True(t, strings.HasSuffix(text, "\n# EOF\n"), "ends with # EOF")
	assert.Equal(t, 1, strings.Count(text, "# EOF"))
	for _, line := range []string{
		"# TYPE health_ready gauge\n",
		"health_ready 1.0\n",
		`health_condition_unmet{condition="registration_pending"} 0.0` + "\n",
		"# TYPE health_check_runs counter\n", // OpenMetrics names the family without _total
		"health_check_runs_total 0.0\n",
		"# TYPE health_probes counter\n",
		`health_probes_total{answer="readyz_ok"} 0.0` + "\n",
	} {
		assert.Contains(t, text, line)
	}
	families := 0
	for _, line := range strings.Split(strings.TrimSuffix(text, "\n# EOF\n"), "\n") {
		assert.True(t, strings.HasPrefix(line, "# HELP health_") || strings.HasPrefix(line, "# TYPE health_") ||
			strings.HasPrefix(line, "health_"), "a line of ours, before # EOF: %q", line)
		if strings.HasPrefix(line, "# HELP ") {
			families++
		}
	}
	assert.Equal(t, len(gather(t, NewCollector(s))), families, "every family has its HELP")
}

// TestWatchdogCountersNeverFall: two workers of a pool share a name, and
// one has timed out. The pool shrinks, then ends: the counters of
// {watchdog="worker"} never fall, because a counter that falls reads as a
// reset, and increase(health_watchdog_timeouts_total[1h]) > 0, the
// README's alert, would fire on timeouts that never happened. The gauges
// follow the watchdogs watched now.
func TestWatchdogCountersNeverFall(t *testing.T) {
	s := newServer()
	s.SetRegistered()
	s.SetDataPlaneReady()
	steady := s.Watch("worker", time.Hour)
	flaky := s.Watch("worker", 20*time.Millisecond)
	for range 10 {
		steady.Beat()
	}
	// Both of flaky's beats come before its deadline: beaten after it, it
	// would be armed again, and a second timeout could pass before the
	// gathers below on a slow machine.
	flaky.Beat()
	flaky.Beat()
	for {
		ch := s.Changed()
		if errors.Is(s.Ready(), health.ErrSubsystemUnresponsive) {
			break
		}
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal("the flaky worker's deadline never passed")
		}
	}

	value := func(series map[string][]*dto.Metric, name string) float64 {
		t.Helper()
		require.Len(t, series[name], 1, name)
		m := series[name][0]
		if m.GetCounter() != nil {
			return m.GetCounter().GetValue()
		}
		return m.GetGauge().GetValue()
	}
	c := NewCollector(s)
	series := gather(t, c)
	assert.Equal(t, 12.0, value(series, "health_watchdog_beats_total"))
	assert.Equal(t, 1.0, value(series, "health_watchdog_timeouts_total"))
	assert.Equal(t, 0.02, value(series, "health_watchdog_timeout_seconds"), "the shorter timeout")

	flaky.Stop()
	series = gather(t, c)
	assert.Equal(t, 12.0, value(series, "health_watchdog_beats_total"), "the stopped worker's beats stay")
	assert.Equal(t, 1.0, value(series, "health_watchdog_timeouts_total"), "the stopped worker's timeout stays")
	assert.Equal(t, 3600.0, value(series, "health_watchdog_timeout_seconds"), "the worker watched now")

	steady.Stop()
	series = gather(t, c)
	assert.Equal(t, 12.0, value(series, "health_watchdog_beats_total"), "a counter outlives every watchdog of its name")
	assert.Equal(t, 1.0, value(series, "health_watchdog_timeouts_total"))
	for _, gauge := range []string{"health_watchdog_overdue", "health_watchdog_timeout_seconds", "health_watchdog_last_beat_timestamp_seconds"} {
		assert.NotContains(t, series, gauge, "no watchdog of the name is watched")
	}
}

// TestWatchdogTimeoutFromConfig: the timeout series is the one in force,
// the config's where it sets one and 0 where it disables the watchdog,
// whose overdue stays 0 though it never beat.
func TestWatchdogTimeoutFromConfig(t *testing.T) {
	s := health.NewServer(health.Config{Watchdogs: map[string]health.Duration{
		"reconcile": health.Duration(10 * time.Minute), "resync": 0,
	}}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for _, w := range []*health.Watchdog{s.Watch("reconcile", time.Minute), s.Watch("resync", time.Minute), s.Watch("watch", time.Minute)} {
		defer w.Stop()
	}
	families := scrape(t, NewCollector(s), health.ErrRegistrationPending, health.ErrDataPlanePending, health.ErrSubsystemUnresponsive)
	gathered := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return families, nil })
	require.NoError(t, testutil.GatherAndCompare(gathered, strings.NewReader(`
# HELP health_watchdog_timeout_seconds The timeout in force of the watchdogs of this name, the config's or else the code's, the shortest if they differ; 0 when the config disables them.
# TYPE health_watchdog_timeout_seconds gauge
health_watchdog_timeout_seconds{watchdog="reconcile"} 600
health_watchdog_timeout_seconds{watchdog="resync"} 0
health_watchdog_timeout_seconds{watchdog="watch"} 60
# HELP health_watchdog_overdue Watchdogs of this name that are overdue: not beaten yet, or not within their timeout.
# TYPE health_watchdog_overdue gauge
health_watchdog_overdue{watchdog="reconcile"} 1
health_watchdog_overdue{watchdog="resync"} 0
health_watchdog_overdue{watchdog="watch"} 1
`), "health_watchdog_timeout_seconds", "health_watchdog_overdue"))
}

// TestShortestTimeout: the watchdogs of one name share a timeout series,
// the shortest of those not disabled, and 0 only when all are.
func TestShortestTimeout(t *testing.T) {
	for _, tc := range []struct {
		name     string
		timeouts []time.Duration
		want     time.Duration
	}{
		{"one", []time.Duration{time.Minute}, time.Minute},
		{"the shortest", []time.Duration{time.Minute, 10 * time.Second, time.Hour}, 10 * time.Second},
		{"disabled", []time.Duration{0}, 0},
		{"all disabled", []time.Duration{0, 0}, 0},
		{"disabled first", []time.Duration{0, time.Minute, 30 * time.Second}, 30 * time.Second},
		{"disabled between", []time.Duration{time.Minute, 0, time.Hour}, time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var watchdogs []health.WatchdogStatus
			for _, d := range tc.timeouts {
				watchdogs = append(watchdogs, health.WatchdogStatus{Name: "pool", Timeout: d})
			}
			series := watchdogsByName(watchdogs)
			require.Len(t, series, 1)
			assert.Equal(t, tc.want, series[0].shortestTimeout)
		})
	}
}

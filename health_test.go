package health

import (
	"bytes"
	"context"
	"errors"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/health/internal/probetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"gopkg.in/yaml.v3"
)

// This file holds what the package's tests share: TestMain, the helpers
// and the table of server states the other _test.go files use, and the
// tests that span the whole package (the concurrency hammer, the README's
// snippet, the imports, go doc's length). Most other test files are paired
// with the source file whose behaviour they check; bench_test.go holds the
// benchmarks and example_test.go the examples.

// TestMain fails the run if any goroutine outlives the tests: Serve and the
// poller promise to leave nothing behind. A test calls goleak.VerifyNone
// itself only where it must know at that moment (it waits for a goroutine
// to end, or that no goroutine is left is what the test is about).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// logBuffer is probetest's log buffer, read once its Server has written
// what it queued.
type logBuffer struct {
	probetest.LogBuffer
	// server, when set, is the Server whose log this is. A line decided
	// in the timer's or the poller's goroutine is written after the
	// answer it reports is published, so String first waits until the
	// server has written every line it queued: a test that saw the
	// answer then finds the line.
	server *Server
}

func (b *logBuffer) String() string {
	if b.server != nil {
		waitLogWritten(b.server)
	}
	return b.LogBuffer.String()
}

// count returns how many log lines contain substr.
func (b *logBuffer) count(substr string) int { return probetest.Count(b.String(), substr) }

func newTestServer(t *testing.T) (*Server, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	logs.server = NewServer(Config{Listen: "127.0.0.1:0"}, slogTo(logs))
	return logs.server, logs
}

// setLatches sets the two latches every agent sets on its way up.
func setLatches(s *Server) {
	s.SetRegistered()
	s.SetDataPlaneReady()
}

// serverStates are states of a Server, each reached through its setters,
// with what each surface says of it: /readyz, /readyz?verbose (with the
// same status) and Status().Unmet, whose first entry is the sentinel
// Ready's error wraps. They reach every row of the README's readiness
// table (TestReadinessTable checks it) and some rows at once.
var serverStates = []struct {
	name    string
	set     func(s *Server)
	status  int
	body    string
	verbose string
	unmet   []error
}{
	{
		name: "fresh server", set: func(*Server) {},
		status: 503, body: "not ready: registration pending\n",
		verbose: "[-]registration failed: registration pending\n[-]data-plane failed: data plane not configured\n[+]event-delivery ok\n[+]subsystems ok\nreadyz check failed\n",
		unmet:   []error{ErrRegistrationPending, ErrDataPlanePending},
	},
	{
		name: "registered", set: func(s *Server) { s.SetRegistered() },
		status: 503, body: "not ready: data plane not configured\n",
		verbose: "[+]registration ok\n[-]data-plane failed: data plane not configured\n[+]event-delivery ok\n[+]subsystems ok\nreadyz check failed\n",
		unmet:   []error{ErrDataPlanePending},
	},
	{
		name: "check pending", set: func(s *Server) { setLatches(s); setCheckVerdict(s, checkVerdict{pending: true}) },
		status: 503, body: "not ready: data plane check pending\n",
		verbose: "[+]registration ok\n[+]data-plane ok\n[-]data-plane-check failed: data plane check pending\n[+]event-delivery ok\n[+]subsystems ok\nreadyz check failed\n",
		unmet:   []error{ErrDataPlaneCheckPending},
	},
	{
		name: "data plane lost", set: func(s *Server) { setLatches(s); setCheckVerdict(s, checkVerdict{err: errPlantedCheck}) },
		status: 503, body: "not ready: data plane lost\n",
		verbose: "[+]registration ok\n[+]data-plane ok\n[-]data-plane-check failed: data plane lost\n[+]event-delivery ok\n[+]subsystems ok\nreadyz check failed\n",
		unmet:   []error{ErrDataPlaneLost},
	},
	{
		name: "check stalled", set: func(s *Server) { setLatches(s); setCheckVerdict(s, checkVerdict{stalled: true}) },
		status: 503, body: "not ready: data plane check stalled\n",
		verbose: "[+]registration ok\n[+]data-plane ok\n[-]data-plane-check failed: data plane check stalled\n[+]event-delivery ok\n[+]subsystems ok\nreadyz check failed\n",
		unmet:   []error{ErrDataPlaneStalled},
	},
	{
		name: "delivery stopped", set: func(s *Server) { setLatches(s); s.SetDeliveryStopped() },
		status: 503, body: "not ready: event delivery stopped\n",
		verbose: "[+]registration ok\n[+]data-plane ok\n[-]event-delivery failed: event delivery stopped\n[+]subsystems ok\nreadyz check failed\n",
		unmet:   []error{ErrDeliveryStopped},
	},
	{
		name: "delivery degraded", set: func(s *Server) { setLatches(s); s.SetDeliveryMode(DeliveryModeDegradedPolling) },
		status: 503, body: "not ready: event delivery degraded\n",
		verbose: "[+]registration ok\n[+]data-plane ok\n[-]event-delivery failed: event delivery degraded\n[+]subsystems ok\nreadyz check failed\n",
		unmet:   []error{ErrDeliveryDegraded},
	},
	{
		name: "subsystem stopped", set: func(s *Server) { setLatches(s); s.SetSubsystemStopped(plantedSubsystem) },
		status: 503, body: "not ready: subsystem stopped\n",
		verbose: "[+]registration ok\n[+]data-plane ok\n[+]event-delivery ok\n[-]subsystems failed: subsystem stopped\nreadyz check failed\n",
		unmet:   []error{ErrSubsystemStopped},
	},
	{
		name: "subsystem unresponsive", set: func(s *Server) { setLatches(s); s.Watch(plantedSubsystem, time.Hour) },
		status: 503, body: "not ready: subsystem unresponsive\n",
		verbose: "[+]registration ok\n[+]data-plane ok\n[+]event-delivery ok\n[-]subsystems failed: subsystem unresponsive\nreadyz check failed\n",
		unmet:   []error{ErrSubsystemUnresponsive},
	},
	{
		name: "a stopped subsystem before an unresponsive loop", set: func(s *Server) {
			setLatches(s)
			s.Watch(plantedSubsystem, time.Hour)
			s.SetSubsystemStopped(plantedSubsystem)
		},
		status: 503, body: "not ready: subsystem stopped\n",
		verbose: "[+]registration ok\n[+]data-plane ok\n[+]event-delivery ok\n[-]subsystems failed: subsystem stopped\nreadyz check failed\n",
		unmet:   []error{ErrSubsystemStopped, ErrSubsystemUnresponsive},
	},
	{
		name: "ready without a check", set: setLatches,
		status: 200, body: "ok\n",
		verbose: "[+]registration ok\n[+]data-plane ok\n[+]event-delivery ok\n[+]subsystems ok\nreadyz check passed\n",
	},
	{
		name: "ready with a passing check", set: func(s *Server) { setLatches(s); setCheckVerdict(s, checkVerdict{}) },
		status: 200, body: "ok\n",
		verbose: "[+]registration ok\n[+]data-plane ok\n[+]data-plane-check ok\n[+]event-delivery ok\n[+]subsystems ok\nreadyz check passed\n",
	},
	{
		name: "check stalled, delivery degraded", set: func(s *Server) {
			setLatches(s)
			setCheckVerdict(s, checkVerdict{stalled: true})
			s.SetDeliveryMode(DeliveryModeDegradedPolling)
		},
		status: 503, body: "not ready: data plane check stalled\n",
		verbose: "[+]registration ok\n[+]data-plane ok\n[-]data-plane-check failed: data plane check stalled\n[-]event-delivery failed: event delivery degraded\n[+]subsystems ok\nreadyz check failed\n",
		unmet:   []error{ErrDataPlaneStalled, ErrDeliveryDegraded},
	},
	{
		name: "a stopped subsystem behind stopped and degraded delivery", set: func(s *Server) {
			setLatches(s)
			s.SetSubsystemStopped(plantedSubsystem)
			s.SetDeliveryStopped()
			s.SetDeliveryMode("")
		},
		status: 503, body: "not ready: event delivery stopped\n",
		verbose: "[+]registration ok\n[+]data-plane ok\n[-]event-delivery failed: event delivery stopped\n[-]subsystems failed: subsystem stopped\nreadyz check failed\n",
		unmet:   []error{ErrDeliveryStopped, ErrDeliveryDegraded, ErrSubsystemStopped},
	},
	{
		name: "everything unmet at once", set: func(s *Server) {
			s.Watch(plantedSubsystem, time.Hour)
			s.SetSubsystemStopped(plantedSubsystem)
			s.SetDeliveryMode(DeliveryModeDegradedPolling)
			s.SetDeliveryStopped()
			setCheckVerdict(s, checkVerdict{err: errPlantedCheck, stalled: true})
		},
		status: 503, body: "not ready: registration pending\n",
		verbose: "[-]registration failed: registration pending\n[-]data-plane failed: data plane not configured\n[-]data-plane-check failed: data plane lost\n[-]event-delivery failed: event delivery stopped\n[-]subsystems failed: subsystem stopped\nreadyz check failed\n",
		unmet: []error{ErrRegistrationPending, ErrDataPlanePending, ErrDataPlaneLost, ErrDataPlaneStalled,
			ErrDeliveryStopped, ErrDeliveryDegraded, ErrSubsystemStopped, ErrSubsystemUnresponsive},
	},
}

// slogTo is a logger that writes every level to logs.
func slogTo(logs *logBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func serve(h http.Handler, method, target string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
	return rec
}

// discardLogger is a logger for tests that assert nothing about the log.
func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// readinessChanges returns the log's "readiness changed" lines, from their
// level on, so that a test can compare the path readiness took, levels
// included.
func readinessChanges(logs *logBuffer) []string {
	var changes []string
	for _, line := range healthLines(logs) {
		if strings.Contains(line, `msg="health: readiness changed"`) {
			changes = append(changes, line)
		}
	}
	return changes
}

// failingCheck returns a check that always fails with err.
func failingCheck(err error) func() error { return func() error { return err } }

// eventually: see probetest.
var eventually = probetest.Eventually

var errPlantedCheck = errors.New("PLANTED-check-error-91bc wg0 10.0.0.1")

const plantedSubsystem = "PLANTED-subsystem-7f3a node-a"

// startServing runs s.Serve on the listener s.Listen returns (the tests'
// servers listen on 127.0.0.1:0) and returns its address and a stop
// function that cancels and returns Serve's result.
func startServing(t testing.TB, s *Server) (addr string, stop func() error) {
	t.Helper()
	ln, err := s.Listen()
	require.NoError(t, err)
	return startServingOn(t, s, ln)
}

// startServingOn is the one way the package's tests run Serve: on ln,
// until stop or the test's cleanup, whichever comes first, cancels it
// (see probetest.Start).
func startServingOn(t testing.TB, s *Server, ln net.Listener) (addr string, stop func() error) {
	t.Helper()
	stop = probetest.Start(t, func(ctx context.Context) error { return s.Serve(ctx, ln) })
	return ln.Addr().String(), stop
}

// serveReady serves a Server with every latch set and returns its address;
// the test's cleanup stops it.
func serveReady(t *testing.T) string {
	t.Helper()
	s, _ := newTestServer(t)
	setLatches(s)
	addr, _ := startServing(t, s)
	return addr
}

// kubeletProbe: see probetest.
var kubeletProbe = probetest.KubeletProbe

// exchange is probetest.Exchange with a bound well above Serve's header
// and write timeouts (2 s each): what must close by one closes within it.
func exchange(t *testing.T, addr, raw string) string {
	t.Helper()
	return probetest.Exchange(t, addr, raw, 8*time.Second)
}

// assertClosedByServer asserts that the server closes c within 10 s.
func assertClosedByServer(t *testing.T, c net.Conn, msgAndArgs ...any) {
	t.Helper()
	assert.True(t, probetest.ClosedByServer(c), msgAndArgs...)
}

// TestConcurrentSettersProbesAndPoller hammers every setter, the poller,
// the watchdogs, Changed, CheckNow and probes together; run under -race it
// proves the probe path and the setters share no unsynchronised state, and
// the end state shows no update was lost.
func TestConcurrentSettersProbesAndPoller(t *testing.T) {
	s, _ := newTestServer(t)
	s.checkPeriod = time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	const rounds = 300
	flapping := s.Watch("flapping", time.Microsecond) // overdue and back all the time
	steady := s.Watch("steady", time.Hour)
	var watched []*Watchdog // guarded by watchedMu
	var watchedMu sync.Mutex
	setters := []func(i int){
		func(int) { flapping.Beat() },
		func(int) { steady.Beat() },
		func(i int) {
			w := s.Watch("loop"+strconv.Itoa(i%3), time.Hour)
			w.Beat()
			if i%2 == 0 {
				w.Stop()
				w.Beat()
				return
			}
			watchedMu.Lock()
			watched = append(watched, w)
			watchedMu.Unlock()
		},
		func(int) { s.CheckNow() },
		func(int) { s.Changed() },
		func(int) { _ = s.Status() },
		func(int) { s.SetRegistered() },
		func(int) { s.SetDataPlaneReady() },
		func(i int) {
			modes := []DeliveryMode{DeliveryModeStreaming, DeliveryModePullOnly, DeliveryModeDegradedPolling, ""}
			s.SetDeliveryMode(modes[i%len(modes)])
		},
		func(i int) { s.SetSubsystemStopped("sub" + strconv.Itoa(i%3)) },
		func(i int) {
			if i%50 == 0 {
				s.SetDataPlaneCheck(ctx, failingCheck(nil))
			}
		},
		func(int) { _ = s.Ready() },
		func(i int) {
			overrides := []map[string]Duration{
				{"steady": Duration(2 * time.Hour), "loop0": 0},
				{"loop1": Duration(3 * time.Hour), "typo": Duration(time.Minute)},
				nil,
			}
			assert.NoError(t, s.SetWatchdogs(overrides[i%len(overrides)]))
		},
		func(i int) {
			if i%50 == 0 { // Listen reads the Config as SetWatchdogs runs
				ln, err := s.Listen()
				if assert.NoError(t, err) {
					_ = ln.Close()
				}
			}
		},
	}
	for _, set := range setters {
		wg.Add(1)
		go func(set func(int)) {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				set(i)
			}
		}(set)
	}
	for p := 0; p < 4; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := s.Handler()
			targets := []string{"/readyz", "/readyz?verbose", "/readyz?exclude=registration&verbose&exclude=x",
				"/readyz/data-plane-check", "/readyz?exclude=subsystems"}
			for i := 0; i < rounds; i++ {
				rec := serve(h, http.MethodGet, targets[i%len(targets)])
				if !isAllowedBody(http.MethodGet, rec.Body.String()) {
					t.Errorf("unexpected body %q", rec.Body.String())
				}
			}
		}()
	}
	wg.Wait()
	s.SetDeliveryMode(DeliveryModeStreaming)
	s.SetDataPlaneCheck(ctx, nil)
	flapping.Stop()
	require.NoError(t, s.SetWatchdogs(nil))
	steady.Beat()
	st := s.Status()
	assert.Len(t, st.Watchdogs, 1+rounds/2, "steady and every odd loop")
	assert.Equal(t, []error{ErrSubsystemStopped}, st.Unmet, "every watchdog left has beaten within its hour")
	steady.Stop()
	for _, w := range watched {
		w.Stop()
	}
	assert.False(t, internals(s).timerArmed)
	assert.ErrorIs(t, s.Ready(), ErrSubsystemStopped)
	assert.Equal(t, `subsystem stopped: "sub0", "sub1", "sub2"`, s.Ready().Error())
	assert.Equal(t, "not ready: subsystem stopped\n", serve(s.Handler(), "GET", "/readyz").Body.String())
}

// allowedBodies are every body the handler may ever write.
var allowedBodies = func() map[string]bool {
	m := map[string]bool{"ok\n": true, "404 page not found\n": true, "Method Not Allowed\n": true}
	for _, c := range conditions {
		m["not ready: "+c.err.Error()+"\n"] = true
	}
	return m
}()

// isAllowedBody reports whether b is one of the bodies the handler may
// write for method: a plain constant or a verbose body made of constant
// lines, and nothing for HEAD alone.
func isAllowedBody(method, b string) bool {
	if method == http.MethodHead {
		return b == ""
	}
	return allowedBodies[b] || verboseBodies[b]
}

// TestREADMEProbeSnippet keeps the README's deployment advice honest: the
// DaemonSet snippet probes DefaultListen on the right paths, its thresholds
// are the ones the README's table explains, and those are the values the
// table argues for (a readiness failureThreshold of 1 with a short timeout
// would let one slow probe mark the node NotReady). The IPv6 variant must
// be a Config that validates and a probe host that reaches it.
func TestREADMEProbeSnippet(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)

	// The values the README explains, field by field: {readiness, liveness}.
	want := map[string][2]int{
		"periodSeconds":    {5, 10},
		"timeoutSeconds":   {2, 5},
		"failureThreshold": {3, 6},
	}
	explained := readmeThresholdTable(readme)
	require.Equal(t, want, explained, "the README's threshold table explains other values than the ones this test knows")
	assert.Greater(t, explained["failureThreshold"][0], 1, "readiness failureThreshold 1: one slow probe marks the node NotReady")
	assert.GreaterOrEqual(t, explained["timeoutSeconds"][1], explained["timeoutSeconds"][0], "liveness is more lenient than readiness")
	assert.Greater(t, explained["failureThreshold"][1]*explained["periodSeconds"][1],
		explained["failureThreshold"][0]*explained["periodSeconds"][0], "liveness gives up later than readiness")

	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllSubmatch(readme, -1)
	require.NotEmpty(t, blocks, "README.md has a yaml block")
	host, port, err := net.SplitHostPort(DefaultListen)
	require.NoError(t, err)
	daemonSets, ipv6, retune := 0, 0, 0
	for _, b := range blocks {
		var spec struct {
			Kind string `yaml:"kind"`
			Spec struct {
				Template struct {
					Spec struct {
						HostNetwork bool `yaml:"hostNetwork"`
						Containers  []struct {
							Name           string       `yaml:"name"`
							LivenessProbe  *readmeProbe `yaml:"livenessProbe"`
							ReadinessProbe *readmeProbe `yaml:"readinessProbe"`
						} `yaml:"containers"`
					} `yaml:"spec"`
				} `yaml:"template"`
			} `yaml:"spec"`
		}
		if yaml.Unmarshal(b[1], &spec) == nil && spec.Kind == "DaemonSet" {
			daemonSets++
			pod := spec.Spec.Template.Spec
			assert.True(t, pod.HostNetwork)
			require.Len(t, pod.Containers, 1)
			for i, p := range []*readmeProbe{pod.Containers[0].ReadinessProbe, pod.Containers[0].LivenessProbe} {
				path := []string{"/readyz", "/healthz"}[i]
				require.NotNil(t, p, path)
				assert.Equal(t, host, p.HTTPGet.Host, path)
				assert.Equal(t, port, strconv.Itoa(p.HTTPGet.Port), path)
				assert.Equal(t, path, p.HTTPGet.Path)
				assert.Equal(t, explained["periodSeconds"][i], p.PeriodSeconds, "%s periodSeconds: the snippet and the table disagree", path)
				assert.Equal(t, explained["timeoutSeconds"][i], p.TimeoutSeconds, "%s timeoutSeconds: the snippet and the table disagree", path)
				assert.Equal(t, explained["failureThreshold"][i], p.FailureThreshold, "%s failureThreshold: the snippet and the table disagree", path)
			}
			continue
		}

		// The IPv6 block: the agent's config and the probe's httpGet.
		var v6 struct {
			Health  *Config        `yaml:"health"`
			HTTPGet *readmeHTTPGet `yaml:"httpGet"`
		}
		if yaml.Unmarshal(b[1], &v6) != nil || v6.Health == nil {
			continue
		}
		if v6.Health.Watchdogs != nil && v6.HTTPGet == nil {
			// The retuning block: overrides that validate, one of
			// them disabling a watchdog.
			retune++
			v6.Health.ApplyDefaults()
			require.NoError(t, v6.Health.Validate())
			assert.Contains(t, v6.Health.Watchdogs, "reconcile")
			assert.Contains(t, slices.Collect(maps.Values(v6.Health.Watchdogs)), Duration(0), "it shows 0 disabling one")
			continue
		}
		ipv6++
		require.NotNil(t, v6.HTTPGet, "the IPv6 block shows the probe's httpGet")
		require.NoError(t, v6.Health.Validate())
		assert.Equal(t, v6.Health.Listen, net.JoinHostPort(v6.HTTPGet.Host, strconv.Itoa(v6.HTTPGet.Port)), "the probe reaches the listener")
		assert.True(t, net.ParseIP(v6.HTTPGet.Host).IsLoopback() && net.ParseIP(v6.HTTPGet.Host).To4() == nil, "an IPv6 loopback host")
	}
	assert.Equal(t, 1, daemonSets, "README.md has one DaemonSet")
	assert.Equal(t, 1, ipv6, "README.md has one IPv6 block")
	assert.Equal(t, 1, retune, "README.md has one block retuning watchdogs")
}

// readmeThresholdTable reads the README's table of probe thresholds, the
// rows "| `field` | readiness | liveness | why |", into field: {readiness,
// liveness}.
func readmeThresholdTable(readme []byte) map[string][2]int {
	rows := regexp.MustCompile("(?m)^\\| `(periodSeconds|timeoutSeconds|failureThreshold)` \\| (\\d+) \\| (\\d+) \\|").FindAllSubmatch(readme, -1)
	table := make(map[string][2]int, len(rows))
	for _, r := range rows {
		readiness, _ := strconv.Atoi(string(r[2]))
		liveness, _ := strconv.Atoi(string(r[3]))
		table[string(r[1])] = [2]int{readiness, liveness}
	}
	return table
}

// readmeProbe is the part of a Kubernetes probe the README's snippet sets.
type readmeProbe struct {
	HTTPGet          readmeHTTPGet `yaml:"httpGet"`
	PeriodSeconds    int           `yaml:"periodSeconds"`
	TimeoutSeconds   int           `yaml:"timeoutSeconds"`
	FailureThreshold int           `yaml:"failureThreshold"`
}

// readmeHTTPGet is a probe's httpGet action.
type readmeHTTPGet struct {
	Host string `yaml:"host"`
	Path string `yaml:"path"`
	Port int    `yaml:"port"`
}

// TestImportsStandardLibraryOnly holds the package to its promise that
// importing it pulls in nothing but the standard library: an agent that
// embeds it, and healthprom's users, must not inherit a dependency through
// it. It asks the go command for every package the package imports, on
// each OS it must build on; test-only imports do not count.
func TestImportsStandardLibraryOnly(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH:", err)
	}
	for _, goos := range []string{"linux", "windows", "darwin", "freebsd"} {
		cmd := exec.Command(goCmd, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".")
		cmd.Env = append(os.Environ(), "GOOS="+goos)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "GOOS=%s go list: %s", goos, out)
		assert.Equal(t, []string{"github.com/meshnode/health/internal/listener", "github.com/meshnode/health"}, strings.Fields(string(out)),
			"GOOS=%s: the packages outside the standard library that health imports", goos)
	}
}

// TestGoDocFitsItsBudget keeps the package's documentation readable in one
// sitting: go doc -all is what a user reads first, and every line over 300
// is a why said twice or a detail that belongs in the README or docs/.
func TestGoDocFitsItsBudget(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH:", err)
	}
	out, err := exec.Command(goCmd, "doc", "-all", ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.LessOrEqual(t, bytes.Count(out, []byte("\n")), 300, "lines of go doc -all")
}

// TestPackageDocListsTheChecks keeps the package doc's list of the
// /readyz/<check> names, where go doc shows them to a user writing a
// node-signal URL, the checks table's, in its order, and has it say of
// the check shown only while a data-plane check is set that it is met
// while none is.
func TestPackageDocListsTheChecks(t *testing.T) {
	file, err := parser.ParseFile(token.NewFileSet(), "health.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	require.NoError(t, err)
	var listed []string
	for _, block := range new(comment.Parser).Parse(file.Doc.Text()).Content {
		list, ok := block.(*comment.List)
		if !ok {
			continue
		}
		for _, item := range list.Items {
			text := string((&comment.Printer{TextWidth: -1}).Text(&comment.Doc{Content: item.Content}))
			name, about, _ := strings.Cut(strings.TrimSpace(text), ": ")
			listed = append(listed, name)
			if i := slices.IndexFunc(checks, func(c check) bool { return c.name == name }); i >= 0 && checks[i].whileInstalled {
				assert.Contains(t, about, "met while no check is set", name)
			}
		}
	}
	var names []string
	for _, c := range checks {
		names = append(names, c.name)
	}
	assert.Equal(t, names, listed, "the package doc's list of checks")
}

package health

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"gopkg.in/yaml.v3"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// logBuffer is a slog destination that tests can read while the poller
// writes to it.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// count returns how many log lines contain substr.
func (b *logBuffer) count(substr string) int {
	n := 0
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.Contains(line, substr) {
			n++
		}
	}
	return n
}

func newTestServer(t *testing.T) (*Server, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return NewServer(Config{Listen: "127.0.0.1:0"}, logger), logs
}

func serve(h http.Handler, method, target string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
	return rec
}

// failingCheck returns a check that always fails with err.
func failingCheck(err error) func() error { return func() error { return err } }

// countingCheck wraps fn and reports the number of each call on calls. The
// poller records a result before it starts the next check, so the call
// numbered n+1 proves that n results have fed readiness.
func countingCheck(fn func() error) (check func() error, calls <-chan int) {
	ch := make(chan int, 1000)
	n := 0
	var mu sync.Mutex
	return func() error {
		mu.Lock()
		n++
		select {
		case ch <- n:
		default:
		}
		mu.Unlock()
		return fn()
	}, ch
}

// waitCalls reads from calls until the check has been called n times.
func waitCalls(t *testing.T, calls <-chan int, n int) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case got := <-calls:
			if got >= n {
				return
			}
		case <-timeout:
			t.Fatalf("the check was not called %d times", n)
		}
	}
}

// eventually waits for cond, for conditions set by a timer (the stall
// bound), where no call of the check marks the moment.
func eventually(t *testing.T, cond func() bool, what string) {
	t.Helper()
	require.Eventually(t, cond, 10*time.Second, time.Millisecond, what)
}

var errPlantedCheck = errors.New("PLANTED-check-error-91bc wg0 10.0.0.1")

const plantedSubsystem = "PLANTED-subsystem-7f3a node-a"

// readinessStates are the rows of the readiness table of SPEC.md, each
// reached by its setters, with the exact answer it must produce.
var readinessStates = []struct {
	name     string
	set      func(s *Server)
	status   int
	body     string
	sentinel error
}{
	{"fresh server", func(s *Server) {}, 503, "not ready: registration pending\n", ErrRegistrationPending},
	{"data plane not configured", func(s *Server) { s.SetRegistered() }, 503, "not ready: data plane not configured\n", ErrDataPlanePending},
	{"data plane lost", func(s *Server) {
		s.SetRegistered()
		s.SetDataPlaneReady()
		s.mu.Lock()
		s.setCheck(checkVerdict{err: errPlantedCheck})
		s.mu.Unlock()
	}, 503, "not ready: data plane lost\n", ErrDataPlaneLost},
	{"data plane check stalled", func(s *Server) {
		s.SetRegistered()
		s.SetDataPlaneReady()
		s.mu.Lock()
		s.setCheck(checkVerdict{stalled: true})
		s.mu.Unlock()
	}, 503, "not ready: data plane check stalled\n", ErrDataPlaneStalled},
	{"event delivery stopped", func(s *Server) {
		s.SetRegistered()
		s.SetDataPlaneReady()
		s.SetDeliveryStopped()
	}, 503, "not ready: event delivery stopped\n", ErrDeliveryStopped},
	{"event delivery degraded", func(s *Server) {
		s.SetRegistered()
		s.SetDataPlaneReady()
		s.SetDeliveryMode(DeliveryModeDegradedPolling)
	}, 503, "not ready: event delivery degraded\n", ErrDeliveryDegraded},
	{"subsystem stopped", func(s *Server) {
		s.SetRegistered()
		s.SetDataPlaneReady()
		s.SetSubsystemStopped(plantedSubsystem)
	}, 503, "not ready: subsystem stopped\n", ErrSubsystemStopped},
	{"ready", func(s *Server) {
		s.SetRegistered()
		s.SetDataPlaneReady()
	}, 200, "ok\n", nil},
}

func TestReadinessTable(t *testing.T) {
	for _, tc := range readinessStates {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newTestServer(t)
			tc.set(s)
			rec := serve(s.Handler(), http.MethodGet, "/readyz")
			assert.Equal(t, tc.status, rec.Code)
			assert.Equal(t, tc.body, rec.Body.String())
			if tc.sentinel == nil {
				assert.NoError(t, s.Ready())
			} else {
				assert.ErrorIs(t, s.Ready(), tc.sentinel)
			}
		})
	}
}

func TestLivenessIsOKInEveryState(t *testing.T) {
	for _, tc := range readinessStates {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newTestServer(t)
			tc.set(s)
			for _, method := range []string{http.MethodGet, http.MethodHead} {
				rec := serve(s.Handler(), method, "/healthz")
				assert.Equal(t, 200, rec.Code, method)
				if method == http.MethodGet {
					assert.Equal(t, "ok\n", rec.Body.String())
				}
			}
		})
	}
}

// TestReadinessPrecedence sets every condition at once and lifts them one
// by one in table order: each answer must be the first condition still
// unmet, whatever else holds.
func TestReadinessPrecedence(t *testing.T) {
	s, _ := newTestServer(t)
	s.SetDeliveryStopped()
	s.SetDeliveryMode(DeliveryModeDegradedPolling)
	s.SetSubsystemStopped("wg")
	s.mu.Lock()
	s.setCheck(checkVerdict{err: errPlantedCheck, stalled: true})
	s.mu.Unlock()

	steps := []struct {
		lift     func()
		body     string
		sentinel error
	}{
		{func() {}, "not ready: registration pending\n", ErrRegistrationPending},
		{s.SetRegistered, "not ready: data plane not configured\n", ErrDataPlanePending},
		{s.SetDataPlaneReady, "not ready: data plane lost\n", ErrDataPlaneLost},
		{func() {
			s.mu.Lock()
			s.setCheck(checkVerdict{stalled: true})
			s.mu.Unlock()
		}, "not ready: data plane check stalled\n", ErrDataPlaneStalled},
		{func() {
			s.mu.Lock()
			s.setCheck(checkVerdict{})
			s.mu.Unlock()
		}, "not ready: event delivery stopped\n", ErrDeliveryStopped},
	}
	for _, step := range steps {
		step.lift()
		rec := serve(s.Handler(), http.MethodGet, "/readyz")
		assert.Equal(t, 503, rec.Code)
		assert.Equal(t, step.body, rec.Body.String())
		assert.ErrorIs(t, s.Ready(), step.sentinel)
	}

	// Delivery stopped is a latch; a fresh server shows the rest of the
	// order: degraded before subsystem stopped.
	s2, _ := newTestServer(t)
	s2.SetRegistered()
	s2.SetDataPlaneReady()
	s2.SetSubsystemStopped("wg")
	s2.SetDeliveryMode("")
	assert.Equal(t, "not ready: event delivery degraded\n", serve(s2.Handler(), "GET", "/readyz").Body.String())
	s2.SetDeliveryMode(DeliveryModeStreaming)
	assert.Equal(t, "not ready: subsystem stopped\n", serve(s2.Handler(), "GET", "/readyz").Body.String())
}

func TestLatchesStaySet(t *testing.T) {
	s, _ := newTestServer(t)
	for i := 0; i < 3; i++ {
		s.SetRegistered()
		s.SetDataPlaneReady()
	}
	require.NoError(t, s.Ready())
	s.SetDeliveryStopped()
	s.SetDeliveryStopped()
	s.SetDeliveryMode(DeliveryModeStreaming)
	assert.ErrorIs(t, s.Ready(), ErrDeliveryStopped, "delivery stopped must not be cleared by a mode change")
}

func TestDeliveryModes(t *testing.T) {
	// agentMode stands for the agent's own delivery-mode type.
	type agentMode string
	tests := []struct {
		mode  DeliveryMode
		ready bool
	}{
		{DeliveryModeStreaming, true},
		{DeliveryModePullOnly, true},
		{DeliveryModeDegradedPolling, false},
		{"", false},
		{"Streaming", false},
		{"streaming ", false},
		{"reconnecting", false},
		{DeliveryMode(agentMode("pull_only")), true},
		{DeliveryMode(agentMode("degraded_polling")), false},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%q", tc.mode), func(t *testing.T) {
			s, _ := newTestServer(t)
			s.SetRegistered()
			s.SetDataPlaneReady()
			s.SetDeliveryMode(tc.mode)
			rec := serve(s.Handler(), http.MethodGet, "/readyz")
			if tc.ready {
				assert.Equal(t, 200, rec.Code)
				assert.NoError(t, s.Ready())
				return
			}
			assert.Equal(t, 503, rec.Code)
			assert.Equal(t, "not ready: event delivery degraded\n", rec.Body.String())
			assert.ErrorIs(t, s.Ready(), ErrDeliveryDegraded)
			assert.Contains(t, s.Ready().Error(), strconv.Quote(string(tc.mode)), "Ready names the mode")
		})
	}

	s, _ := newTestServer(t)
	s.SetRegistered()
	s.SetDataPlaneReady()
	s.SetDeliveryMode(DeliveryModeDegradedPolling)
	s.SetDeliveryMode(DeliveryModeStreaming)
	assert.NoError(t, s.Ready(), "the mode is the latest one, not a latch")
}

func TestReadyCarriesDetail(t *testing.T) {
	s, _ := newTestServer(t)
	s.SetRegistered()
	s.SetDataPlaneReady()
	s.SetSubsystemStopped("wg")
	s.SetSubsystemStopped("")
	s.SetSubsystemStopped("wg")
	s.SetSubsystemStopped("odd\nname\x00")
	err := s.Ready()
	assert.ErrorIs(t, err, ErrSubsystemStopped)
	assert.Equal(t, `subsystem stopped: "wg", "", "odd\nname\x00"`, err.Error())

	s.mu.Lock()
	s.setCheck(checkVerdict{err: errPlantedCheck})
	s.mu.Unlock()
	assert.ErrorIs(t, s.Ready(), ErrDataPlaneLost)
	assert.ErrorIs(t, s.Ready(), errPlantedCheck, "the check's own error is reachable")
}

func TestHandlerResponses(t *testing.T) {
	s, _ := newTestServer(t) // not ready: registration pending
	tests := []struct {
		method, target string
		status         int
		body           string
	}{
		{"GET", "/healthz", 200, "ok\n"},
		{"HEAD", "/healthz", 200, ""},
		{"GET", "/readyz", 503, "not ready: registration pending\n"},
		{"HEAD", "/readyz", 503, ""},
		{"GET", "/healthz?verbose=1&exclude=x", 200, "ok\n"},
		{"GET", "/readyz?verbose", 503, "not ready: registration pending\n"},
		{"POST", "/healthz", 405, "Method Not Allowed\n"},
		{"PUT", "/readyz", 405, "Method Not Allowed\n"},
		{"DELETE", "/readyz", 405, "Method Not Allowed\n"},
		{"OPTIONS", "/healthz", 405, "Method Not Allowed\n"},
		{"get", "/healthz", 405, "Method Not Allowed\n"},
		{"GET", "/", 404, "404 page not found\n"},
		{"GET", "/healthz/", 404, "404 page not found\n"},
		{"GET", "//healthz", 404, "404 page not found\n"},
		{"GET", "/./healthz", 404, "404 page not found\n"},
		{"GET", "/x/../healthz", 404, "404 page not found\n"},
		{"GET", "/%68ealthz", 404, "404 page not found\n"},
		{"GET", "/HEALTHZ", 404, "404 page not found\n"},
		{"GET", "/readyz/x", 404, "404 page not found\n"},
		{"POST", "/nothing", 404, "404 page not found\n"},
		{"HEAD", "/nothing", 404, ""},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.target, func(t *testing.T) {
			rec := serve(s.Handler(), tc.method, tc.target)
			assert.Equal(t, tc.status, rec.Code)
			assert.Equal(t, tc.body, rec.Body.String())
			h := rec.Result().Header
			assert.Equal(t, "text/plain; charset=utf-8", h.Get("Content-Type"))
			assert.Equal(t, "nosniff", h.Get("X-Content-Type-Options"))
			assert.Equal(t, "no-store", h.Get("Cache-Control"))
			assert.Empty(t, h.Get("Location"), "never a redirect")
			if tc.status == 405 {
				assert.Equal(t, "GET, HEAD", h.Get("Allow"))
			} else {
				assert.Empty(t, h.Get("Allow"))
			}
			get := serve(s.Handler(), http.MethodGet, tc.target)
			if tc.status != 405 {
				assert.Equal(t, strconv.Itoa(get.Body.Len()), h.Get("Content-Length"), "HEAD announces the length GET sends")
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	var c Config
	c.ApplyDefaults()
	assert.Equal(t, DefaultListen, c.Listen)
	assert.Nil(t, c.Enabled, "ApplyDefaults leaves Enabled nil")
	assert.True(t, c.IsEnabled())

	c = Config{Listen: "0.0.0.0:8080"}
	c.ApplyDefaults()
	assert.Equal(t, "0.0.0.0:8080", c.Listen, "a set field is kept")

	yes, no := true, false
	assert.True(t, (&Config{Enabled: &yes}).IsEnabled())
	assert.False(t, (&Config{Enabled: &no}).IsEnabled())
}

func TestConfigValidate(t *testing.T) {
	good := []string{
		"127.0.0.1:9101", ":9101", "0.0.0.0:0", "[::1]:9101", "[::]:65535",
		"localhost:9101", "node-1.example_internal:80", "[fe80::1%eth0]:9101", "127.0.0.1:09101",
	}
	for _, listen := range good {
		t.Run(listen, func(t *testing.T) {
			c := Config{Listen: listen}
			assert.NoError(t, c.Validate())
		})
	}
	bad := []struct{ listen, want string }{
		{"", "health: listen is empty"},
		{"127.0.0.1", `health: listen "127.0.0.1" is not host:port`},
		{"9101", `health: listen "9101" is not host:port`},
		{"::1:9101", `health: listen "::1:9101" is not host:port`},
		{"127.0.0.1:", `health: listen "127.0.0.1:": port "" is not a number from 0 to 65535`},
		{"127.0.0.1:65536", `health: listen "127.0.0.1:65536": port "65536" is not a number from 0 to 65535`},
		{"127.0.0.1:-1", `health: listen "127.0.0.1:-1": port "-1" is not a number from 0 to 65535`},
		{"127.0.0.1:+80", `health: listen "127.0.0.1:+80": port "+80" is not a number from 0 to 65535`},
		{"127.0.0.1:http", `health: listen "127.0.0.1:http": port "http" is not a number from 0 to 65535`},
		{"bad host:9101", `health: listen "bad host:9101": host "bad host" is neither an IP address nor a host name`},
		{"a/b:9101", `health: listen "a/b:9101": host "a/b" is neither an IP address nor a host name`},
	}
	for _, tc := range bad {
		t.Run(tc.listen, func(t *testing.T) {
			c := Config{Listen: tc.listen}
			err := c.Validate()
			require.Error(t, err)
			assert.True(t, strings.HasPrefix(err.Error(), tc.want), "got %q, want prefix %q", err, tc.want)
		})
	}
}

func TestConfigYAML(t *testing.T) {
	type agentConfig struct {
		Health Config `yaml:"health"`
	}
	tests := []struct {
		name    string
		doc     string
		enabled bool
		listen  string
	}{
		{"block omitted", "node: a\n", true, DefaultListen},
		{"empty block", "health: {}\n", true, DefaultListen},
		{"disabled", "health:\n  enabled: false\n", false, DefaultListen},
		{"enabled", "health:\n  enabled: true\n", true, DefaultListen},
		{"all interfaces", "health:\n  listen: \":9101\"\n", true, ":9101"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var cfg agentConfig
			require.NoError(t, yaml.Unmarshal([]byte(tc.doc), &cfg))
			cfg.Health.ApplyDefaults()
			require.NoError(t, cfg.Health.Validate())
			assert.Equal(t, tc.enabled, cfg.Health.IsEnabled())
			assert.Equal(t, tc.listen, cfg.Health.Listen)
		})
	}
}

func TestReadinessChangesAreLoggedOnce(t *testing.T) {
	s, logs := newTestServer(t)
	s.SetRegistered()
	s.SetRegistered()
	s.SetDataPlaneReady()
	s.SetDataPlaneReady()
	s.SetDeliveryMode(DeliveryModePullOnly) // still ready: no change
	s.SetDeliveryMode(DeliveryModeDegradedPolling)
	s.SetDeliveryMode(DeliveryModeDegradedPolling)
	s.SetSubsystemStopped(`we"ird name`)

	for i := 0; i < 100; i++ {
		serve(s.Handler(), http.MethodGet, "/readyz")
		serve(s.Handler(), http.MethodGet, "/healthz")
	}
	want := []string{
		`level=WARN msg="health: readiness changed" ready=false reason="data plane not configured"`,
		`level=INFO msg="health: readiness changed" ready=true`,
		`level=WARN msg="health: readiness changed" ready=false reason="event delivery degraded"`,
		`level=ERROR msg="health: subsystem stopped" subsystem="we\"ird name"`,
	}
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		got = append(got, line[strings.Index(line, "level="):])
	}
	assert.Equal(t, want, got, "one line per change, none per probe")
}

// newPolledServer is a server with every latch set and a 1 ms check
// period, so that a test sees many polls.
func newPolledServer(t *testing.T) (*Server, *logBuffer) {
	t.Helper()
	s, logs := newTestServer(t)
	s.checkPeriod = time.Millisecond
	s.SetRegistered()
	s.SetDataPlaneReady()
	return s, logs
}

func TestDataPlaneCheck(t *testing.T) {
	t.Run("runs at once, fails, recovers, logs each change once", func(t *testing.T) {
		defer goleak.VerifyNone(t)
		s, logs := newPolledServer(t)
		var mu sync.Mutex
		failing := true
		check, calls := countingCheck(func() error {
			mu.Lock()
			defer mu.Unlock()
			if failing {
				return errPlantedCheck
			}
			return nil
		})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s.SetDataPlaneCheck(ctx, check)
		waitCalls(t, calls, 5) // four failed results recorded
		assert.ErrorIs(t, s.Ready(), ErrDataPlaneLost)
		assert.ErrorIs(t, s.Ready(), errPlantedCheck)
		rec := serve(s.Handler(), http.MethodGet, "/readyz")
		assert.Equal(t, "not ready: data plane lost\n", rec.Body.String())

		mu.Lock()
		failing = false
		mu.Unlock()
		waitCalls(t, calls, 10) // at least four passing results recorded
		assert.NoError(t, s.Ready())
		cancel()

		assert.Equal(t, 1, logs.count(`msg="health: data-plane check failed"`))
		assert.Equal(t, 1, logs.count("PLANTED-check-error-91bc"))
		assert.Equal(t, 1, logs.count(`level=INFO msg="health: data-plane check recovered"`))
		assert.Equal(t, 1, logs.count(`reason="data plane lost"`))
	})

	t.Run("never runs per probe", func(t *testing.T) {
		defer goleak.VerifyNone(t)
		s, _ := newTestServer(t) // the real period: one call in this test's life
		check, calls := countingCheck(func() error { return nil })
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s.SetDataPlaneCheck(ctx, check)
		waitCalls(t, calls, 1)
		for i := 0; i < 1000; i++ {
			serve(s.Handler(), http.MethodGet, "/readyz")
		}
		cancel()
		assert.Empty(t, calls, "probes must not call the check")
	})

	t.Run("a panic is a failed check and the poller goes on", func(t *testing.T) {
		defer goleak.VerifyNone(t)
		s, logs := newPolledServer(t)
		check, calls := countingCheck(func() error { panic("PLANTED-panic-value") })
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s.SetDataPlaneCheck(ctx, check)
		waitCalls(t, calls, 3)
		cancel()
		assert.ErrorIs(t, s.Ready(), ErrDataPlaneLost)
		assert.Contains(t, s.Ready().Error(), "PLANTED-panic-value")
		assert.Equal(t, "not ready: data plane lost\n", serve(s.Handler(), "GET", "/readyz").Body.String())
		assert.Equal(t, 1, logs.count(`msg="health: data-plane check failed" err="data-plane check panicked: PLANTED-panic-value" stack=`))
		assert.Contains(t, logs.String(), "health.TestDataPlaneCheck", "the stack names the panicking function")
	})

	t.Run("a second call replaces the first", func(t *testing.T) {
		defer goleak.VerifyNone(t)
		s, _ := newPolledServer(t)
		release := make(chan struct{})
		firstStarted := make(chan struct{})
		var once sync.Once
		first := func() error {
			once.Do(func() { close(firstStarted) })
			<-release
			return errPlantedCheck
		}
		ctx := context.Background()
		s.SetDataPlaneCheck(ctx, first)
		<-firstStarted
		second, calls := countingCheck(func() error { return nil })
		s.SetDataPlaneCheck(ctx, second)
		waitCalls(t, calls, 2)
		require.NoError(t, s.Ready())
		close(release) // the first check returns its error now
		waitCalls(t, calls, 4)
		assert.NoError(t, s.Ready(), "the replaced check's result must feed nothing")
		s.SetDataPlaneCheck(ctx, nil)
	})

	t.Run("the earlier verdict stands until the new check's first result", func(t *testing.T) {
		defer goleak.VerifyNone(t)
		s, _ := newPolledServer(t)
		check, calls := countingCheck(failingCheck(errPlantedCheck))
		s.SetDataPlaneCheck(context.Background(), check)
		waitCalls(t, calls, 2)
		release := make(chan struct{})
		started := make(chan struct{})
		s.SetDataPlaneCheck(context.Background(), func() error {
			close(started)
			<-release
			return nil
		})
		<-started
		assert.ErrorIs(t, s.Ready(), ErrDataPlaneLost, "no readiness on no evidence")
		close(release)
		s.SetDataPlaneCheck(context.Background(), nil)
	})

	t.Run("nil fn stops the poller and drops the verdict", func(t *testing.T) {
		defer goleak.VerifyNone(t)
		s, _ := newPolledServer(t)
		check, calls := countingCheck(failingCheck(errPlantedCheck))
		s.SetDataPlaneCheck(context.Background(), check)
		waitCalls(t, calls, 2)
		require.ErrorIs(t, s.Ready(), ErrDataPlaneLost)
		s.SetDataPlaneCheck(context.Background(), nil)
		assert.NoError(t, s.Ready())
		assert.Equal(t, 200, serve(s.Handler(), "GET", "/readyz").Code)
	})

	t.Run("a hung check is a stall until it returns", func(t *testing.T) {
		defer goleak.VerifyNone(t)
		s, logs := newPolledServer(t)
		release := make(chan struct{})
		var hang sync.Once
		check, calls := countingCheck(func() error {
			hang.Do(func() { <-release })
			return nil
		})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s.SetDataPlaneCheck(ctx, check)
		eventually(t, func() bool { return errors.Is(s.Ready(), ErrDataPlaneStalled) }, "stalled")
		assert.Equal(t, "not ready: data plane check stalled\n", serve(s.Handler(), "GET", "/readyz").Body.String())
		assert.Len(t, calls, 1, "never two checks at once")
		close(release)
		waitCalls(t, calls, 3)
		assert.NoError(t, s.Ready())
		cancel()
		assert.Equal(t, 1, logs.count(`level=ERROR msg="health: data-plane check stalled" after=3ms`))
		assert.Equal(t, 1, logs.count(`msg="health: data-plane check recovered"`))
	})

	t.Run("a stall behind a failure reports the failure", func(t *testing.T) {
		defer goleak.VerifyNone(t)
		s, _ := newPolledServer(t)
		release := make(chan struct{})
		n := 0
		s.SetDataPlaneCheck(context.Background(), func() error {
			n++
			if n == 2 {
				<-release
			}
			return errPlantedCheck
		})
		eventually(t, func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.check.stalled
		}, "stalled")
		assert.ErrorIs(t, s.Ready(), ErrDataPlaneLost, "row 3 comes before row 4")
		close(release)
		s.SetDataPlaneCheck(context.Background(), nil)
	})

	t.Run("stops on ctx even while fn is blocked", func(t *testing.T) {
		defer goleak.VerifyNone(t)
		s, _ := newPolledServer(t)
		release := make(chan struct{})
		check, calls := countingCheck(func() error {
			<-release
			return errPlantedCheck
		})
		ctx, cancel := context.WithCancel(context.Background())
		s.SetDataPlaneCheck(ctx, check)
		waitCalls(t, calls, 1)
		cancel()
		close(release) // the poller exits as soon as fn returns
		eventually(t, func() bool { return errors.Is(s.Ready(), ErrDataPlaneLost) }, "the in-flight result counts")
		// goleak, deferred, proves the goroutine is gone; the verdict stays.
	})

	t.Run("a context already done runs nothing; nil ctx is Background", func(t *testing.T) {
		defer goleak.VerifyNone(t)
		s, _ := newTestServer(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		s.SetDataPlaneCheck(ctx, func() error { panic("must not run") })
		var nilCtx context.Context
		check, calls := countingCheck(func() error { return nil })
		s.SetDataPlaneCheck(nilCtx, check)
		waitCalls(t, calls, 1)
		s.SetDataPlaneCheck(nilCtx, nil)
	})
}

// TestConcurrentSettersProbesAndPoller hammers every setter, the poller and
// probes together; run under -race it proves the probe path and the
// setters share no unsynchronised state, and the end state shows no update
// was lost.
func TestConcurrentSettersProbesAndPoller(t *testing.T) {
	defer goleak.VerifyNone(t)
	s, _ := newTestServer(t)
	s.checkPeriod = time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	const rounds = 300
	setters := []func(i int){
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
			for i := 0; i < rounds; i++ {
				rec := serve(h, http.MethodGet, "/readyz")
				if !isAllowedBody(rec.Body.String()) {
					t.Errorf("unexpected body %q", rec.Body.String())
				}
			}
		}()
	}
	wg.Wait()
	s.SetDeliveryMode(DeliveryModeStreaming)
	s.SetDataPlaneCheck(ctx, nil)
	assert.ErrorIs(t, s.Ready(), ErrSubsystemStopped)
	assert.Equal(t, `subsystem stopped: "sub0", "sub1", "sub2"`, s.Ready().Error())
	assert.Equal(t, "not ready: subsystem stopped\n", serve(s.Handler(), "GET", "/readyz").Body.String())
}

// allowedBodies are every body the handler may ever write.
var allowedBodies = func() map[string]bool {
	m := map[string]bool{"": true, "ok\n": true, "404 page not found\n": true, "Method Not Allowed\n": true}
	for _, err := range reasons {
		m["not ready: "+err.Error()+"\n"] = true
	}
	return m
}()

func isAllowedBody(b string) bool { return allowedBodies[b] }

// FuzzHandler parses arbitrary request bytes with net/http's own parser and
// checks that every answer is one of the constants, with none of the
// strings planted in the server's state anywhere in the response.
func FuzzHandler(f *testing.F) {
	f.Add("GET", "/readyz", "", "Accept", "*/*")
	f.Add("HEAD", "/healthz", "verbose=1", "X-Forwarded-For", "10.0.0.1")
	f.Add("POST", "//healthz", "a=%00", "Content-Length", "5")
	f.Add("GET", "/%72eadyz", "", "Connection", "close")
	f.Add("OPTIONS", "*", "", "Expect", "100-continue")
	f.Add("GET", "http://node/readyz", "", "Host", "node")

	failing := NewServer(Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	failing.SetRegistered()
	failing.SetDataPlaneReady()
	failing.SetSubsystemStopped(plantedSubsystem)
	failing.mu.Lock()
	failing.setCheck(checkVerdict{err: errPlantedCheck})
	failing.mu.Unlock()
	stopped := NewServer(Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	stopped.SetRegistered()
	stopped.SetDataPlaneReady()
	stopped.SetSubsystemStopped(plantedSubsystem)
	handlers := []http.Handler{failing.Handler(), stopped.Handler()}

	f.Fuzz(func(t *testing.T, method, path, query, name, value string) {
		target := path
		if query != "" {
			target += "?" + query
		}
		raw := method + " " + target + " HTTP/1.1\r\nHost: node\r\n" + name + ": " + value + "\r\n\r\n"
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
		if err != nil {
			return // net/http answers it with its own 4xx; the handler never sees it
		}
		for _, h := range handlers {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			body := rec.Body.String()
			if !isAllowedBody(body) {
				t.Fatalf("%q: body %q is not a constant", raw, body)
			}
			switch rec.Code {
			case 200, 404, 405, 503:
			default:
				t.Fatalf("%q: status %d", raw, rec.Code)
			}
			var dump bytes.Buffer
			_ = rec.Result().Header.Write(&dump)
			dump.WriteString(body)
			for _, planted := range []string{"PLANTED", "wg0", "10.0.0.1", "node-a"} {
				if strings.Contains(dump.String(), planted) {
					t.Fatalf("%q: response carries %q:\n%s", raw, planted, dump.String())
				}
			}
		}
	})
}

// startServing runs Serve on a fresh 127.0.0.1:0 listener and returns its
// address and a stop function that cancels and returns Serve's result.
func startServing(t *testing.T, s *Server) (addr string, stop func() error) {
	t.Helper()
	ln, err := s.Listen()
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	var once sync.Once
	var result error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case result = <-done:
			case <-time.After(30 * time.Second):
				result = errors.New("Serve did not return")
			}
		})
		return result
	}
	t.Cleanup(func() { _ = stop() })
	return ln.Addr().String(), stop
}

// kubeletProbe does what the kubelet's httpGet probe does: a fresh
// connection, one GET, and the whole answer read. It reads on to the
// server's close, so that a test's next step starts after the server has
// let go of this connection.
func kubeletProbe(addr, path string) (status int, body string, err error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0, "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	req := "GET " + path + " HTTP/1.1\r\nHost: " + addr + "\r\nUser-Agent: kube-probe/1.31\r\nAccept: */*\r\nConnection: close\r\n\r\n"
	if _, err := io.WriteString(c, req); err != nil {
		return 0, "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil {
		_, err = io.Copy(io.Discard, c)
	}
	return resp.StatusCode, string(b), err
}

// assertClosedByServer reads c until the server's close shows: EOF, or a
// reset when the server closed with request bytes still unread. A timeout
// means the server kept the connection open.
func assertClosedByServer(t *testing.T, c net.Conn, msgAndArgs ...any) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		assert.Fail(t, "the server kept the connection open", msgAndArgs...)
	}
}

func TestServeOverTCP(t *testing.T) {
	defer goleak.VerifyNone(t)
	s, _ := newTestServer(t)
	addr, stop := startServing(t, s)

	status, body, err := kubeletProbe(addr, "/healthz")
	require.NoError(t, err)
	assert.Equal(t, 200, status)
	assert.Equal(t, "ok\n", body)
	status, body, err = kubeletProbe(addr, "/readyz")
	require.NoError(t, err)
	assert.Equal(t, 503, status)
	assert.Equal(t, "not ready: registration pending\n", body)

	s.SetRegistered()
	s.SetDataPlaneReady()
	status, body, err = kubeletProbe(addr, "/readyz")
	require.NoError(t, err)
	assert.Equal(t, 200, status, "a setter is visible to the next probe")
	assert.Equal(t, "ok\n", body)

	assert.NoError(t, stop())
}

func TestListenAddressInUse(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	s := NewServer(Config{Listen: taken.Addr().String()}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ln, err := s.Listen()
	require.Error(t, err)
	assert.Nil(t, ln)
	assert.ErrorIs(t, err, syscall.EADDRINUSE)
	assert.Contains(t, err.Error(), taken.Addr().String())
	assert.Contains(t, err.Error(), "address already in use")
	assert.Contains(t, err.Error(), "hostNetwork")
}

func TestListenRejectsBadConfig(t *testing.T) {
	s := NewServer(Config{Listen: "127.0.0.1:99999"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	_, err := s.Listen()
	assert.EqualError(t, err, `health: listen "127.0.0.1:99999": port "99999" is not a number from 0 to 65535`)
}

func TestListenWarnsOffLoopback(t *testing.T) {
	for _, tc := range []struct {
		listen string
		warns  int
	}{{"127.0.0.1:0", 0}, {"localhost:0", 0}, {":0", 1}} {
		t.Run(tc.listen, func(t *testing.T) {
			logs := &logBuffer{}
			s := NewServer(Config{Listen: tc.listen}, slog.New(slog.NewTextHandler(logs, nil)))
			ln, err := s.Listen()
			require.NoError(t, err)
			_ = ln.Close()
			assert.Equal(t, tc.warns, logs.count(`level=WARN msg="health: listening on a non-loopback address; the probe endpoints are unauthenticated"`))
		})
	}
}

func TestDisabled(t *testing.T) {
	defer goleak.VerifyNone(t)
	off := false
	s := NewServer(Config{Enabled: &off}, nil)
	ln, err := s.Listen()
	assert.NoError(t, err)
	assert.Nil(t, ln)
	assert.NoError(t, s.Serve(context.Background(), nil), "disabled: Serve(ctx, nil) returns nil at once")

	on := NewServer(Config{}, nil)
	assert.EqualError(t, on.Serve(context.Background(), nil),
		"health: Serve: the listener is nil but the config is enabled; pass the listener Listen returned")
}

// TestServeShutsDownDespiteStalledClients holds half-sent requests and
// silent connections open, cancels, and expects Serve to return nil with
// every connection closed and no goroutine left.
func TestServeShutsDownDespiteStalledClients(t *testing.T) {
	defer goleak.VerifyNone(t)
	s, _ := newTestServer(t)
	addr, stop := startServing(t, s)
	var clients []net.Conn
	for i := 0; i < 20; i++ {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer c.Close()
		if i%2 == 0 {
			_, err = io.WriteString(c, "GET /readyz HTTP/1.1\r\nHost: x\r\n")
			require.NoError(t, err)
		}
		clients = append(clients, c)
	}
	// A probe answered after the stalled clients proves they were accepted.
	status, _, err := kubeletProbe(addr, "/healthz")
	require.NoError(t, err)
	require.Equal(t, 200, status)

	require.NoError(t, stop())
	for i, c := range clients {
		if i%2 != 0 {
			continue // never accepted: the kernel holds it, the listener is gone
		}
		assertClosedByServer(t, c, "client %d", i)
	}
}

// failingListener fails on its own after its first connection.
type failingListener struct {
	net.Listener
	accepted int
}

var errListenerBroke = errors.New("listener broke")

func (l *failingListener) Accept() (net.Conn, error) {
	if l.accepted > 0 {
		return nil, errListenerBroke
	}
	l.accepted++
	return l.Listener.Accept()
}

func TestServeReturnsListenerFailure(t *testing.T) {
	defer goleak.VerifyNone(t)
	s, _ := newTestServer(t)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	held, err := net.Dial("tcp", inner.Addr().String())
	require.NoError(t, err)
	defer held.Close()
	_, err = io.WriteString(held, "GET /healthz HTTP/1.1\r\n") // stalled, held open
	require.NoError(t, err)

	err = s.Serve(context.Background(), &failingListener{Listener: inner})
	require.ErrorIs(t, err, errListenerBroke)
	assert.Contains(t, err.Error(), inner.Addr().String())
	assertClosedByServer(t, held, "the connection it had accepted")
}

// exchange sends raw bytes on a fresh connection and returns everything the
// server sends back before it closes the connection.
func exchange(t *testing.T, addr, raw string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	_, err = io.WriteString(c, raw)
	require.NoError(t, err)
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	got, err := io.ReadAll(c)
	require.NoError(t, err, "the server closes the connection; the client's deadline never fires")
	return string(got)
}

func TestStalledConnectionIsClosed(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the server's cleanup
	addr := serveReady(t)
	got := exchange(t, addr, "GET /healthz HTTP/1.1\r\nHost: x\r\n")
	assert.NotContains(t, got, "200 OK")
}

func TestOneRequestPerConnection(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the server's cleanup
	addr := serveReady(t)
	got := exchange(t, addr, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	assert.Equal(t, 1, strings.Count(got, "HTTP/1.1 "), "one answer, then close:\n%s", got)
	assert.Contains(t, got, "\r\nConnection: close\r\n")
	assert.True(t, strings.HasSuffix(got, "\r\n\r\nok\n"))
}

func TestOversizedHeaderNeverOK(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the server's cleanup
	addr := serveReady(t)
	for _, size := range []int{9 << 10, 64 << 10, 1 << 20} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			go func() {
				// The server may close before all is written; that is the point.
				_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: "+strings.Repeat("a", size)+"\r\n\r\n")
			}()
			got, _ := io.ReadAll(c)
			assert.NotContains(t, string(got), " 200 ")
			if len(got) > 0 {
				assert.True(t, strings.HasPrefix(string(got), "HTTP/1.1 431 "), "%q", got)
			}
		})
	}
}

// serveReady serves a Server with every latch set and returns its address;
// the test's cleanup stops it.
func serveReady(t *testing.T) string {
	t.Helper()
	s, _ := newTestServer(t)
	s.SetRegistered()
	s.SetDataPlaneReady()
	addr, _ := startServing(t, s)
	return addr
}

// dialStalled opens a connection that sends part of a request and stops.
func dialStalled(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	_, err = io.WriteString(c, "GET /readyz HTTP/1.1\r\nHost: x\r\n")
	require.NoError(t, err)
	return c
}

// TestStalledConnectionsCannotCostAProbe fills every connection slot with
// stalled half-sent requests, holds more than that open, and then probes
// over TCP: every probe must be answered. Which connections are evicted is
// TestLimiterEvictionOrder's subject: here the header timeout would close
// the stalled ones too, so their closing proves nothing about the order.
func TestStalledConnectionsCannotCostAProbe(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the server's cleanup
	addr := serveReady(t)

	const extra, probes = 40, 40
	for i := 0; i < maxConns-closingReserve+extra; i++ {
		dialStalled(t, addr)
	}
	for i := 0; i < probes; i++ {
		path := []string{"/healthz", "/readyz"}[i%2]
		status, body, err := kubeletProbe(addr, path)
		require.NoError(t, err, "probe %d", i)
		assert.Equal(t, 200, status, "probe %d", i)
		assert.Equal(t, "ok\n", body, "probe %d", i)
	}
}

// TestLimiterEvictionOrder drives the limiter without net/http, so that no
// timeout closes anything and every close is the limiter's: stalled
// connections are evicted oldest first, an answered one before any of
// them, a complete request and the newcomer never; the bound holds; and
// the onset of pressure is logged once.
func TestLimiterEvictionOrder(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	logs := &logBuffer{}
	l := newConnLimiter(ln, slog.New(slog.NewTextHandler(logs, nil)))
	defer l.Close()

	state := func(c *limitedConn) slotState {
		l.mu.Lock()
		defer l.mu.Unlock()
		return c.state
	}
	var held []*limitedConn
	// accept takes the next connection, then ends the goroutines of those
	// the limiter evicted, as net/http's would.
	accept := func(request string) *limitedConn {
		t.Helper()
		client, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { _ = client.Close() })
		_, err = io.WriteString(client, request)
		require.NoError(t, err)
		nc, err := l.Accept()
		require.NoError(t, err)
		c := nc.(*limitedConn)
		kept := held[:0]
		for _, h := range append(held, c) {
			if state(h) == connEvicted {
				l.connState(h, http.StateClosed)
			} else {
				kept = append(kept, h)
			}
		}
		held = kept
		return c
	}
	const stalledRequest = "GET /readyz HTTP/1.1\r\nHost: x\r\n"
	const fullRequest = "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n"

	threshold := maxConns - closingReserve
	var stalled []*limitedConn
	for i := 0; i < threshold; i++ {
		stalled = append(stalled, accept(stalledRequest))
	}
	require.Equal(t, 0, logs.count("connection slots full"))

	// Past the threshold, each newcomer evicts the oldest stalled one.
	for i := 0; i < 10; i++ {
		newcomer := accept(stalledRequest)
		assert.Equal(t, connReleased, state(stalled[i]), "stalled %d evicted", i)
		assert.Equal(t, connWaiting, state(stalled[i+1]), "stalled %d kept", i+1)
		assert.Equal(t, connWaiting, state(newcomer), "never the newcomer")
	}
	assert.Equal(t, 1, logs.count(`msg="health: connection slots full; closing the oldest connections that have not sent a request" slots=256`))

	// Under pressure a complete request is seen at accept and protected,
	// even once it is the oldest of all.
	complete := accept(fullRequest)
	assert.Equal(t, connComplete, state(complete))
	// An answered connection goes before the oldest stalled one.
	_, err = stalled[20].Write([]byte("HTTP/1.1 200 OK\r\n\r\n"))
	require.NoError(t, err)
	accept(stalledRequest)
	assert.Equal(t, connReleased, state(stalled[20]), "the answered one is evicted first")
	assert.Equal(t, connWaiting, state(stalled[11]), "the oldest stalled one is kept this time")
	for i := 0; i < threshold; i++ {
		accept(stalledRequest)
	}
	assert.Equal(t, connComplete, state(complete), "a complete request is never evicted")
	l.mu.Lock()
	assert.LessOrEqual(t, l.held, maxConns)
	assert.Equal(t, threshold, l.held-l.evicted)
	l.mu.Unlock()
	assert.Equal(t, 1, logs.count("connection slots full"), "logged once, not per eviction")
}

func TestREADMEProbeSnippet(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllSubmatch(readme, -1)
	require.NotEmpty(t, blocks, "README.md has a yaml block")
	var spec struct {
		Kind string `yaml:"kind"`
		Spec struct {
			Template struct {
				Spec struct {
					HostNetwork bool `yaml:"hostNetwork"`
					Containers  []struct {
						Name           string `yaml:"name"`
						LivenessProbe  *probe `yaml:"livenessProbe"`
						ReadinessProbe *probe `yaml:"readinessProbe"`
					} `yaml:"containers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	found := false
	for _, b := range blocks {
		if err := yaml.Unmarshal(b[1], &spec); err != nil || spec.Kind != "DaemonSet" {
			continue
		}
		found = true
		pod := spec.Spec.Template.Spec
		assert.True(t, pod.HostNetwork)
		require.Len(t, pod.Containers, 1)
		host, port, err := net.SplitHostPort(DefaultListen)
		require.NoError(t, err)
		for path, p := range map[string]*probe{"/healthz": pod.Containers[0].LivenessProbe, "/readyz": pod.Containers[0].ReadinessProbe} {
			require.NotNil(t, p, path)
			assert.Equal(t, host, p.HTTPGet.Host, path)
			assert.Equal(t, port, strconv.Itoa(p.HTTPGet.Port), path)
			assert.Equal(t, path, p.HTTPGet.Path)
		}
	}
	assert.True(t, found, "README.md has a DaemonSet")
}

type probe struct {
	HTTPGet struct {
		Host string `yaml:"host"`
		Path string `yaml:"path"`
		Port int    `yaml:"port"`
	} `yaml:"httpGet"`
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestSlowProbeSurvivesChurn is load 4 in miniature: a probe whose request
// comes late, after many newer connections have churned through a full
// pool. Under pressure the kernel keeps the silent probe connection until
// its request arrives, so it is never the oldest waiting connection in the
// pool; a limiter that accepted it at once would have evicted it.
func TestSlowProbeSurvivesChurn(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("deferred accept is Linux's TCP_DEFER_ACCEPT")
	}
	t.Cleanup(func() { goleak.VerifyNone(t) })
	addr := serveReady(t)

	// One past the eviction threshold: the oldest is evicted, and the
	// limiter is under pressure.
	first := make([]net.Conn, maxConns-closingReserve+1)
	for i := range first {
		first[i] = dialStalled(t, addr)
	}
	assertClosedByServer(t, first[0], "the first eviction")

	probe, err := net.Dial("tcp", addr) // handshake done, request not yet sent
	require.NoError(t, err)
	defer probe.Close()

	// Churn: each newcomer evicts the oldest waiting connection, so the
	// whole first batch goes, and then the oldest of the churn itself. Had
	// the probe been accepted when it connected, it would have been among
	// the victims. This has to happen within deferAcceptSeconds, after
	// which the kernel hands the silent probe over anyway; it takes a small
	// fraction of that.
	const extra = 16
	churn := make([]net.Conn, len(first)-1+extra)
	for i := range churn {
		churn[i] = dialStalled(t, addr)
	}
	assertClosedByServer(t, churn[extra-1], "the churn's last eviction")

	_, err = io.WriteString(probe, "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	_ = probe.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(probe)
	require.NoError(t, err, "%q", got)
	assert.True(t, strings.HasPrefix(string(got), "HTTP/1.1 200 OK\r\n"), "%q", got)
	assert.True(t, strings.HasSuffix(string(got), "\r\n\r\nok\n"), "%q", got)
}

// TestUndrainedBodiesCannotCostAProbe fills every slot with requests that
// are answered at once but whose declared bodies never come: net/http holds
// each one for its read timeout, draining the body after the answer.
// Answered connections are evicted first, so every newcomer, drainer or
// probe, gets its answer; were they protected, a full pool would have to
// evict newer connections before their requests had been read.
func TestUndrainedBodiesCannotCostAProbe(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	addr := serveReady(t)

	var drainers []net.Conn
	for i := 0; i < maxConns; i++ {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer c.Close()
		_, err = io.WriteString(c, "POST /readyz HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
		require.NoError(t, err)
		drainers = append(drainers, c)
	}
	// Every drainer is answered (405) before its body would be read.
	for i, c := range drainers {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err, "drainer %d", i)
		_ = resp.Body.Close()
		require.Equal(t, 405, resp.StatusCode, "drainer %d", i)
	}
	for i := 0; i < 20; i++ {
		status, body, err := kubeletProbe(addr, "/readyz")
		require.NoError(t, err, "probe %d", i)
		assert.Equal(t, 200, status, "probe %d", i)
		assert.Equal(t, "ok\n", body, "probe %d", i)
	}
	assertClosedByServer(t, drainers[0], "the oldest answered connection was evicted")
}

// TestHostileRequestsLogNothing sends malformed and hostile requests over
// TCP: each gets net/http's own 4xx or one of the constant answers, and
// none of them writes a line to the agent's log.
func TestHostileRequestsLogNothing(t *testing.T) {
	defer goleak.VerifyNone(t)
	s, logs := newTestServer(t)
	addr, stop := startServing(t, s)
	defer stop()
	before := logs.String()

	tests := []struct{ raw, status string }{
		{"GET /readyz?a=1;b=2 HTTP/1.1\r\nHost: x\r\n\r\n", "503"},
		{"GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", "501"},
		{"GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n", "505"},
		{"GET /healthz HTTP/1.1\r\n\r\n", "400"},
		{"GET\r\n\r\n", "400"},
		{"\x00\x01\x02\r\n\r\n", "400"},
		{"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", "400"},
		{"GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header: 1\r\n\r\n", "400"},
		{"GET /healthz HTTP/1.1\r\nHost: x\r\nX: " + strings.Repeat("a", 16<<10) + "\r\n\r\n", "431"},
		{"POST /healthz HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n", "405"},
		{"GET http://evil.example/readyz HTTP/1.1\r\nHost: evil.example\r\n\r\n", "503"},
		{"CONNECT 127.0.0.1:22 HTTP/1.1\r\nHost: 127.0.0.1:22\r\n\r\n", "404"},
		{"GET /healthz HTTP/1.1\r\nHost: x\r\nUpgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n", "200"},
		{"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "404"},
	}
	for _, tc := range tests {
		got := exchange(t, addr, tc.raw)
		assert.True(t, strings.HasPrefix(got, "HTTP/1.1 "+tc.status+" "), "%q: got %q", tc.raw, got)
	}
	assert.Equal(t, before, logs.String(), "nothing is logged per request")
}

package listener

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/meshnode/health/internal/probetest"
)

// TestMain checks that no test leaves a goroutine behind: Serve promises
// to end everything it starts.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeProbes stands in for the root's handler: fixed answers for /healthz
// and /readyz, counted, written alike by its ServeHTTP (through net/http)
// and its answer (the short path), as the root's are.
type fakeProbes struct {
	ready atomic.Bool
	// Answers counted, by path: /healthz, /readyz, anything else.
	liveness, readiness, other atomic.Uint64
}

// fakeAnswer is one of fakeProbes' answers, in both of its forms.
type fakeAnswer struct {
	header http.Header
	resp   Response
}

func newFakeAnswer(status int, body string) *fakeAnswer {
	h := http.Header{
		"Content-Type":           {"text/plain; charset=utf-8"},
		"X-Content-Type-Options": {"nosniff"},
		"Cache-Control":          {"no-store"},
		"Content-Length":         {strconv.Itoa(len(body))},
	}
	if status == http.StatusMethodNotAllowed {
		h["Allow"] = []string{"GET, HEAD"}
	}
	var lines strings.Builder
	_ = h.Write(&lines) // sorted by name, as net/http writes a handler's header
	return &fakeAnswer{header: h, resp: Response{Status: status, Header: []byte(lines.String()), Body: []byte(body)}}
}

var (
	fakeOK        = newFakeAnswer(http.StatusOK, "ok\n")
	fakeNotReady  = newFakeAnswer(http.StatusServiceUnavailable, "not ready: registration pending\n")
	fakeVerbose   = newFakeAnswer(http.StatusOK, "[+]registration ok\nreadyz check passed\n")
	fakeNotFound  = newFakeAnswer(http.StatusNotFound, "404 page not found\n")
	fakeNotMethod = newFakeAnswer(http.StatusMethodNotAllowed, "Method Not Allowed\n")
)

// route is the one router of both forms, as the root's is.
func (p *fakeProbes) route(method, path, rawQuery string) (*fakeAnswer, *atomic.Uint64) {
	a, counter := fakeNotFound, &p.other
	switch path {
	case "/healthz":
		a, counter = fakeOK, &p.liveness
	case "/readyz":
		a, counter = fakeNotReady, &p.readiness
		if p.ready.Load() {
			a = fakeOK
			if strings.Contains(rawQuery, "verbose") {
				a = fakeVerbose
			}
		}
	}
	if a != fakeNotFound && method != http.MethodGet && method != http.MethodHead {
		a, counter = fakeNotMethod, &p.other
	}
	return a, counter
}

func (p *fakeProbes) answer(method, path string, rawQuery []byte) (*Response, *atomic.Uint64) {
	a, counter := p.route(method, path, string(rawQuery)) // on the stack: route keeps nothing
	return &a.resp, counter
}

func (p *fakeProbes) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	if r.URL.RawPath != "" {
		path = ""
	}
	a, counter := p.route(r.Method, path, r.URL.RawQuery)
	counter.Add(1)
	for k, v := range a.header {
		w.Header()[k] = v
	}
	w.WriteHeader(a.resp.Status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(a.resp.Body)
	}
}

func (p *fakeProbes) answered() uint64 {
	return p.liveness.Load() + p.readiness.Load() + p.other.Load()
}

// served is a Serve call of a test's, on a fresh 127.0.0.1:0 listener.
type served struct {
	addr     string
	probes   *fakeProbes
	counters *Counters
	logs     *probetest.LogBuffer
	stop     func() error // cancels Serve and returns its result
}

// serveTest serves fakeProbes with a bound of limit slots.
func serveTest(t *testing.T, limit int) *served {
	t.Helper()
	ln, err := Listen("127.0.0.1:0")
	require.NoError(t, err)
	return serveTestWith(t, ln, Options{Limit: limit})
}

// serveTestWith serves fakeProbes on ln with opts' Limit and room; the
// test's cleanup stops it.
func serveTestWith(t *testing.T, ln net.Listener, opts Options) *served {
	t.Helper()
	s := &served{addr: ln.Addr().String(), probes: new(fakeProbes), counters: new(Counters), logs: new(probetest.LogBuffer)}
	opts.Handler, opts.Answer, opts.Counters, opts.Log = s.probes, s.probes.answer, s.counters, logTo(s.logs)
	s.stop = probetest.Start(t, func(ctx context.Context) error { return Serve(ctx, ln, opts) })
	return s
}

// exchange is probetest.Exchange with a bound well above any of Serve's
// (headerTimeout, writeTimeout): what must close by one of them closes
// within it.
func exchange(t *testing.T, addr, raw string) string {
	t.Helper()
	return probetest.Exchange(t, addr, raw, 4*headerTimeout)
}

// logTo is a LogFunc that writes slog's text lines to w.
func logTo(w io.Writer) LogFunc {
	logger := slog.New(slog.NewTextHandler(w, nil))
	return func(level slog.Level, msg string, args ...any) {
		logger.Log(context.Background(), level, msg, args...)
	}
}

var discardLog = logTo(io.Discard)

// hasRoom reports whether Serve makes a waiting room on this OS.
func hasRoom() bool { return runtime.GOOS == "linux" }

// TestCountEviction: an eviction is counted and stamped on MonotonicNow's
// clock, which the root's Status reads Pressure by.
func TestCountEviction(t *testing.T) {
	var c Counters
	before := MonotonicNow()
	c.countEviction()
	after := MonotonicNow()
	assert.Equal(t, uint64(1), c.Evicted.Load())
	stamped := c.LastEviction.Load()
	assert.True(t, before <= stamped && stamped <= after, "%d is not within [%d, %d]", stamped, before, after)
}

// dialAll opens n connections to addr from 8 goroutines at once, each
// writing req, and returns them, closed at the test's end.
func dialAll(t *testing.T, addr string, n int, req string) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, n)
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				_ = c.Close()
			}
		}
	})
	var wg sync.WaitGroup
	const dialers = 8
	for d := range dialers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := d; i < n; i += dialers {
				c, err := net.Dial("tcp", addr)
				if !assert.NoError(t, err) {
					return
				}
				conns[i] = c
				_, err = io.WriteString(c, req)
				assert.NoError(t, err)
			}
		}()
	}
	wg.Wait()
	require.NotContains(t, conns, nil, "every client connected")
	return conns
}

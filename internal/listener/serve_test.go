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

// fakeProbes is these tests' handler: a fixed answer for /healthz, one
// for /readyz (ready or not), and one for any other path, counted by
// path, written alike by ServeHTTP (through net/http) and answer (without
// it). It routes by path alone, never by method or query: what the tests
// here check is the listener's part, answering what the handler would;
// the root's tests hold its own handler and routing.
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
	fakeOK       = newFakeAnswer(http.StatusOK, "ok\n")
	fakeNotReady = newFakeAnswer(http.StatusServiceUnavailable, "not ready: registration pending\n")
	fakeNotFound = newFakeAnswer(http.StatusNotFound, "404 page not found\n")
)

// route is the one router of both forms.
func (p *fakeProbes) route(path string) (*fakeAnswer, *atomic.Uint64) {
	switch {
	case path == "/healthz":
		return fakeOK, &p.liveness
	case path == "/readyz" && p.ready.Load():
		return fakeOK, &p.readiness
	case path == "/readyz":
		return fakeNotReady, &p.readiness
	}
	return fakeNotFound, &p.other
}

func (p *fakeProbes) answer(_ string, path, _ []byte) (*Response, *atomic.Uint64) {
	a, counter := p.route(string(path)) // on the stack: route keeps nothing
	return &a.resp, counter
}

func (p *fakeProbes) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	if r.URL.RawPath != "" {
		path = ""
	}
	a, counter := p.route(path)
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

// serveTest is the one way the package's tests run Serve: it serves
// fakeProbes, ready, on ln, or on a fresh listener of Listen's on
// 127.0.0.1:0 for a nil ln, with opts' Limit (maxLimit for 0) and room
// (see Options.room), and opts' Handler for net/http if it has one; the
// test's cleanup stops it (see probetest.Start).
func serveTest(t *testing.T, ln net.Listener, opts Options) *served {
	t.Helper()
	if ln == nil {
		var err error
		ln, err = Listen("127.0.0.1:0")
		require.NoError(t, err)
	}
	if opts.Limit == 0 {
		opts.Limit = maxLimit
	}
	s := &served{addr: ln.Addr().String(), probes: new(fakeProbes), counters: new(Counters), logs: new(probetest.LogBuffer)}
	s.probes.ready.Store(true)
	if opts.Handler == nil {
		opts.Handler = s.probes
	}
	opts.Answer, opts.Counters, opts.Log = s.probes.answer, s.counters, logTo(s.logs)
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

// roomRig drives a limiter without net/http, so that every close is
// the limiter's (its waiting room's, where it has one, or its short
// path's) and every connection that leaves it for net/http is seen:
// Accept's returns arrive on handed.
type roomRig struct {
	t        *testing.T
	addr     string
	l        *connLimiter
	probes   *fakeProbes
	counters *Counters
	logs     *probetest.LogBuffer
	handed   chan net.Conn
}

// newRoomRig runs a limiter with a waiting room of size (see
// Options.room) on ln, or on a fresh listener of Listen's for a nil ln;
// a room of a positive size must be made.
func newRoomRig(t *testing.T, ln net.Listener, size int) *roomRig {
	t.Helper()
	if ln == nil {
		var err error
		ln, err = Listen("127.0.0.1:0")
		require.NoError(t, err)
	}
	r := &roomRig{t: t, addr: ln.Addr().String(), probes: new(fakeProbes), counters: new(Counters), logs: new(probetest.LogBuffer), handed: make(chan net.Conn, 64)}
	r.l = newConnLimiter(ln, maxLimit, Options{Answer: r.probes.answer, Counters: r.counters, Log: logTo(r.logs), room: size})
	if size > 0 {
		require.NotNil(t, r.l.room, r.logs.String())
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			nc, err := r.l.Accept()
			if err != nil {
				return
			}
			r.handed <- nc
		}
	}()
	t.Cleanup(func() {
		_ = r.l.Close()
		for {
			select {
			case nc := <-r.handed:
				r.release(nc) // the room hands on clients that shut their side
				continue
			case <-done:
			}
			break
		}
		for len(r.handed) > 0 { // handed before done, if select chose done
			r.release(<-r.handed)
		}
		r.l.wait()
	})
	return r
}

// release closes a connection handed on, as net/http's goroutine would.
func (r *roomRig) release(nc net.Conn) {
	_ = nc.Close()
	r.l.trackState(nc, http.StateClosed)
}

// waiting is how many connections the room holds, for a header, a body
// or a linger.
func (r *roomRig) waiting() int {
	r.l.room.mu.Lock()
	defer r.l.room.mu.Unlock()
	return r.l.room.waiting.len + r.l.room.lingering.len
}

// partialProbe is a probe's request but its last byte.
var partialProbe = probeRequest[:len(probeRequest)-1]

// dial connects and writes what.
func (r *roomRig) dial(what string) net.Conn {
	r.t.Helper()
	c, err := net.Dial("tcp", r.addr)
	require.NoError(r.t, err)
	r.t.Cleanup(func() { _ = c.Close() })
	if what != "" {
		_, err = io.WriteString(c, what)
		require.NoError(r.t, err)
	}
	return c
}

// dialWaiting connects, writes part of a header, and returns once the
// connection waits in the room, which is then n long.
func (r *roomRig) dialWaiting(n int) net.Conn {
	r.t.Helper()
	c := r.dial(partialProbe)
	probetest.Eventually(r.t, func() bool { return r.waiting() == n }, "the connection waiting")
	return c
}

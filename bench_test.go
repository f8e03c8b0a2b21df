package health

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/health/internal/listener"
	"github.com/meshnode/health/internal/probetest"
	"github.com/stretchr/testify/require"
)

// benchWriter is the one minimal, reusable ResponseWriter every in-process
// benchmark uses, so that what is measured is the handler and nothing else.
type benchWriter struct {
	header http.Header
	status int
	n      int
}

func newBenchWriter() *benchWriter { return &benchWriter{header: make(http.Header, 8)} }

func (w *benchWriter) Header() http.Header { return w.header }
func (w *benchWriter) WriteHeader(status int) {
	w.status = status
}
func (w *benchWriter) Write(p []byte) (int, error) {
	w.n += len(p)
	return len(p), nil
}

var floorBody = []byte("ok\n")

// floorHandler is the cheapest handler that answers a probe: the floor
// every route of Handler is compared with.
func floorHandler(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(floorBody) }

func floorMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", floorHandler)
	return mux
}

func BenchmarkFloor(b *testing.B) {
	benchHandler(b, http.HandlerFunc(floorHandler), http.MethodGet, "/healthz")
}

func BenchmarkFloorMux(b *testing.B) {
	benchHandler(b, floorMux(), http.MethodGet, "/healthz")
}

// probeRoutes are every route and state of Handler, by name. A watched
// server has a watchdog, met when ready and never beaten when not, with
// every latch set.
var probeRoutes = []struct {
	name, method, target string
	ready                bool
	status               int
	watched              bool
}{
	{"healthz", "GET", "/healthz", false, 200, false},
	{"readyz_ready", "GET", "/readyz", true, 200, false},
	{"readyz_not_ready", "GET", "/readyz", false, 503, false},
	{"head_readyz", "HEAD", "/readyz", true, 200, false},
	{"readyz_verbose_ready", "GET", "/readyz?verbose", true, 200, false},
	{"readyz_verbose_not_ready", "GET", "/readyz?verbose", false, 503, false},
	{"head_readyz_verbose", "HEAD", "/readyz?x=1&verbose=1", true, 200, false},
	{"readyz_verbose_escaped", "GET", "/readyz?a=1;b&verb%6Fse", false, 503, false},
	{"readyz_query_not_verbose", "GET", "/readyz?verbosex=1&x=verbose", true, 200, false},
	{"not_found", "GET", "/metrics", false, 404, false},
	{"method_not_allowed", "POST", "/healthz", false, 405, false},
	{"readyz_watched_ready", "GET", "/readyz", true, 200, true},
	{"readyz_unresponsive", "GET", "/readyz", false, 503, true},
	{"readyz_verbose_unresponsive", "GET", "/readyz?verbose", false, 503, true},
	{"readyz_check_ready", "GET", "/readyz/data-plane", true, 200, false},
	{"readyz_check_not_ready", "GET", "/readyz/registration", false, 503, false},
	{"head_readyz_check", "HEAD", "/readyz/subsystems", false, 503, true},
	{"readyz_check_unknown", "GET", "/readyz/nope", true, 404, false},
	{"readyz_check_post", "POST", "/readyz/data-plane-check", true, 405, false},
	{"readyz_node_signal_not_ready", "GET", "/readyz?exclude=registration&exclude=event-delivery&exclude=subsystems", false, 503, false},
	{"readyz_node_signal_ready", "GET", "/readyz?exclude=registration&exclude=event-delivery&exclude=subsystems", false, 200, true},
	{"readyz_exclude_verbose", "GET", "/readyz?exclude=registration&exclude=data%2Dplane&verbose", false, 200, false},
	{"readyz_exclude_unknown_verbose", "GET", "/readyz?verbose&exclude=nope&exclude=registration", false, 503, false},
}

func probeServer(ready, watched bool) *Server {
	s := NewServer(Config{}, discardLogger())
	if ready || watched {
		s.SetRegistered()
		s.SetDataPlaneReady()
	}
	if watched {
		w := s.Watch("probe-loop", time.Hour)
		if ready {
			w.Beat()
		}
	}
	return s
}

func BenchmarkHandler(b *testing.B) {
	for _, r := range probeRoutes {
		b.Run(r.name, func(b *testing.B) {
			benchHandler(b, probeServer(r.ready, r.watched).Handler(), r.method, r.target)
		})
	}
}

func benchHandler(b *testing.B, h http.Handler, method, target string) {
	w := newBenchWriter()
	req := httptest.NewRequest(method, target, nil)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h.ServeHTTP(w, req)
	}
}

// TestProbeAllocatesNothing is the deterministic half of the benchmarks:
// every route and state of Handler allocates nothing, and answers as it
// should while doing so.
func TestProbeAllocatesNothing(t *testing.T) {
	for _, r := range probeRoutes {
		t.Run(r.name, func(t *testing.T) {
			h := probeServer(r.ready, r.watched).Handler()
			w := newBenchWriter()
			req := httptest.NewRequest(r.method, r.target, nil)
			allocs := testing.AllocsPerRun(1000, func() { h.ServeHTTP(w, req) })
			require.Zero(t, allocs)
			require.Equal(t, r.status, w.status)

			// The route as Serve's listener takes it.
			s := probeServer(r.ready, r.watched)
			path, query, _ := strings.Cut(r.target, "?")
			var resp *listener.Response
			allocs = testing.AllocsPerRun(1000, func() { resp = s.answer(r.method, path, query) })
			require.Zero(t, allocs)
			require.Equal(t, r.status, resp.Status)
		})
	}
}

// BenchmarkEndToEnd compares Serve with a plain http.Server serving the
// floor handler with the same timeouts, over loopback, one fresh
// connection per request as the kubelet does. The two alternate request by
// request, so that whatever else the machine does weighs on both alike;
// the metric to read is health/floor, the ratio of requests per second.
// The request is a kubelet's, which Serve answers at accept, without the
// goroutine and buffers the floor server spends on it.
func BenchmarkEndToEnd(b *testing.B) {
	s := NewServer(Config{Listen: "127.0.0.1:0"}, discardLogger())
	s.SetRegistered()
	s.SetDataPlaneReady()
	healthAddr, _ := startServing(b, s)
	floorAddr := probetest.ServeHTTP(b, probetest.PlainServer(http.HandlerFunc(floorHandler)))

	var healthTime, floorTime time.Duration
	buf := make([]byte, 4096)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		first, second := floorAddr, healthAddr
		if i%2 == 1 {
			first, second = second, first // neither always follows the other
		}
		start := time.Now()
		probeOnce(b, first, buf)
		mid := time.Now()
		probeOnce(b, second, buf)
		end := time.Now()
		if first == floorAddr {
			floorTime, healthTime = floorTime+mid.Sub(start), healthTime+end.Sub(mid)
		} else {
			healthTime, floorTime = healthTime+mid.Sub(start), floorTime+end.Sub(mid)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(floorTime)/float64(healthTime), "health/floor")
	b.ReportMetric(float64(healthTime.Nanoseconds())/float64(b.N), "health-ns/req")
	b.ReportMetric(float64(floorTime.Nanoseconds())/float64(b.N), "floor-ns/req")
}

const benchRequest = "GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: kube-probe/1.31\r\nAccept: */*\r\nConnection: close\r\n\r\n"

// probeOnce sends one request on a fresh connection and reads the answer
// to the server's close. It reads raw bytes rather than parsing them, so
// that the client's cost, which shares the machine, does not depend on how
// many headers the server sends.
func probeOnce(b *testing.B, addr string, buf []byte) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, benchRequest); err != nil {
		b.Fatal(err)
	}
	n, err := io.ReadFull(c, buf)
	if err != io.ErrUnexpectedEOF {
		b.Fatalf("read %d bytes: %v", n, err)
	}
	if !bytes.HasPrefix(buf[:n], []byte("HTTP/1.1 200 OK\r\n")) || !bytes.HasSuffix(buf[:n], []byte("\r\n\r\nok\n")) {
		b.Fatalf("answer %q", buf[:n])
	}
}

// BenchmarkVerdictChange is what a change of readiness costs the setter
// that makes it, under the Server's lock: the new verdict, with every
// /readyz?verbose answer it may give (64, by excludes and warning) built
// ahead, so that no probe builds one. Each iteration is one change
// (delivery degraded, then streaming again); SetDeliveryMode with no
// change is the floor.
func BenchmarkVerdictChange(b *testing.B) {
	for _, change := range []bool{false, true} {
		b.Run(map[bool]string{false: "floor_no_change", true: "change"}[change], func(b *testing.B) {
			s := probeServer(true, false)
			modes := [2]DeliveryMode{DeliveryModeStreaming, DeliveryModeStreaming}
			if change {
				modes[1] = DeliveryModeDegradedPolling
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				s.SetDeliveryMode(modes[i%2])
			}
		})
	}
}

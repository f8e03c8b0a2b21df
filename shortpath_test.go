package health

import (
	"errors"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// plainProbeRequests are requests of every shape the short path takes:
// GET and HEAD, each target and query form, HTTP/1.1 and HTTP/1.0, and
// headers that are odd but plain.
func plainProbeRequests() []string {
	targets := []string{
		"/healthz", "/healthz?verbose", "/healthz?",
		"/readyz", "/readyz?", "/readyz?verbose", "/readyz?verbose=1", "/readyz?x=1&verbose",
		"/readyz?verb%6Fse", "/readyz?verbosex=1&x=verbose", "/readyz?verbose#frag",
		"/readyz?a=1;verbose", "/readyz?a=1;b&verbose", "/readyz?%zz&verbose", "/readyz?verbose=%zz",
		"/readyz??verbose", "/readyz?verbose&verbose", "/readyz?+verbose", "/readyz?%20verbose",
		"/readyz?" + strings.Repeat("q", 200) + "&verbose",
	}
	headers11 := []string{
		"Host: x\r\n",
		"Host: 127.0.0.1:9101\r\nUser-Agent: kube-probe/1.31\r\nAccept: */*\r\nConnection: close\r\n",
		"host:[::1]:9101\r\nconnection: keep-alive\r\n",
		"HOST: \t node-a.example_x~%25 \t\r\nX-Empty:\r\nX-Tabs:\tv\tw\t\r\nAccept-Encoding: gzip\r\nConnection: Upgrade, close\r\n",
		"Host: x\r\nPragma: no-cache\r\nCookie: a=b\r\nTE: trailers\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\nKeep-Alive: 300\r\n",
		"Host: x\r\n" + manyHeaders(60),
	}
	headers10 := []string{
		"",
		"Host: x\r\n",
		"User-Agent: kube-probe/1.31\r\nAccept: */*\r\n",
		"Host: x\r\n" + manyHeaders(60),
	}
	var reqs []string
	for _, method := range []string{"GET", "HEAD"} {
		for _, target := range targets {
			for _, h := range headers11 {
				reqs = append(reqs, method+" "+target+" HTTP/1.1\r\n"+h+"\r\n")
			}
			for _, h := range headers10 {
				reqs = append(reqs, method+" "+target+" HTTP/1.0\r\n"+h+"\r\n")
			}
		}
	}
	return reqs
}

// manyHeaders is n header lines of a probe with custom httpHeaders.
func manyHeaders(n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString("X-Custom-" + strconv.Itoa(i) + ": value-" + strconv.Itoa(i) + "\r\n")
	}
	return b.String()
}

// notPlainProbes are requests the short path must leave to net/http, each
// with the reason.
var notPlainProbes = []struct{ name, raw string }{
	{"bare LF line ends", "GET /healthz HTTP/1.1\nHost: x\n\n"},
	{"a bare LF ends the header", "GET /healthz HTTP/1.1\r\nHost: x\n\r\n"},
	{"a bare LF in the request line", "GET /healthz HTTP/1.1\nHost: x\r\n\r\n"},
	{"a bare CR in a value", "GET /healthz HTTP/1.1\r\nHost: x\r\nX: a\rb\r\n\r\n"},
	{"lower-case method", "get /healthz HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"POST", "POST /healthz HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"OPTIONS", "OPTIONS /readyz HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"two spaces", "GET  /healthz HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"trailing space", "GET /healthz HTTP/1.1 \r\nHost: x\r\n\r\n"},
	{"tab separator", "GET\t/healthz HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"tab before version", "GET /healthz\tHTTP/1.1\r\nHost: x\r\n\r\n"},
	{"absolute target", "GET http://x/healthz HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"trailing slash", "GET /healthz/ HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"double slash", "GET //healthz HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"escaped path", "GET /%68ealthz HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"dot segment", "GET /./readyz HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"fragment in the path", "GET /readyz#x HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"another path", "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"8-bit byte in the query", "GET /readyz?\x80verbose HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"DEL in the query", "GET /readyz?\x7fverbose HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"space in the query", "GET /readyz?a b HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"HTTP/1.2", "GET /healthz HTTP/1.2\r\nHost: x\r\n\r\n"},
	{"HTTP/2.0", "GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n"},
	{"HTTP/0.9", "GET /healthz HTTP/0.9\r\n\r\n"},
	{"lower-case version", "GET /healthz http/1.1\r\nHost: x\r\n\r\n"},
	{"leading CRLF", "\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"no Host", "GET /healthz HTTP/1.1\r\nAccept: */*\r\n\r\n"},
	{"two Hosts", "GET /healthz HTTP/1.1\r\nHost: x\r\nHost: x\r\n\r\n"},
	{"two Hosts, HTTP/1.0", "GET /healthz HTTP/1.0\r\nHost: x\r\nhost: y\r\n\r\n"},
	{"empty Host", "GET /healthz HTTP/1.1\r\nHost: \r\n\r\n"},
	{"Host with a space", "GET /healthz HTTP/1.1\r\nHost: a b\r\n\r\n"},
	{"Host with a slash", "GET /healthz HTTP/1.1\r\nHost: a/b\r\n\r\n"},
	{"Host with a comma", "GET /healthz HTTP/1.1\r\nHost: a,b\r\n\r\n"},
	{"Host with an 8-bit byte", "GET /healthz HTTP/1.1\r\nHost: \xe9\r\n\r\n"},
	{"space before the colon", "GET /healthz HTTP/1.1\r\nHost : x\r\n\r\n"},
	{"tab before the colon", "GET /healthz HTTP/1.1\r\nHost\t: x\r\n\r\n"},
	{"empty name", "GET /healthz HTTP/1.1\r\nHost: x\r\n: v\r\n\r\n"},
	{"no colon", "GET /healthz HTTP/1.1\r\nHost: x\r\nX\r\n\r\n"},
	{"name with a slash", "GET /healthz HTTP/1.1\r\nHost: x\r\nX/Y: v\r\n\r\n"},
	{"NUL in a name", "GET /healthz HTTP/1.1\r\nHost: x\r\nX\x00: v\r\n\r\n"},
	{"NUL in a value", "GET /healthz HTTP/1.1\r\nHost: x\r\nX: a\x00b\r\n\r\n"},
	{"8-bit byte in a value", "GET /healthz HTTP/1.1\r\nHost: x\r\nX: caf\xc3\xa9\r\n\r\n"},
	{"obs-fold", "GET /healthz HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n"},
	{"obs-fold of Host", "GET /healthz HTTP/1.1\r\nHost: x\r\n\ty\r\n\r\n"},
	{"first line folded", "GET /healthz HTTP/1.1\r\n Host: x\r\n\r\n"},
	{"Content-Length: 0", "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"},
	{"Content-Length: 0 twice", "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\ncontent-length: 0\r\n\r\n"},
	{"Content-Length with its body", "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi"},
	{"Transfer-Encoding", "GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
	{"Transfer-Encoding alone", "GET /healthz HTTP/1.1\r\nHost: x\r\nTRANSFER-ENCODING: identity\r\n\r\n"},
	{"Trailer", "GET /healthz HTTP/1.1\r\nHost: x\r\nTrailer: X\r\n\r\n"},
	{"Expect: 100-continue", "GET /healthz HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n\r\n"},
	{"Expect: other", "GET /readyz HTTP/1.1\r\nHost: x\r\nexpect: x\r\n\r\n"},
	{"Upgrade", "GET /healthz HTTP/1.1\r\nHost: x\r\nUpgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n"},
	{"websocket", "GET /readyz HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"},
	{"HTTP/1.0 keep-alive", "GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"},
	{"HTTP/1.0 keep-alive on HEAD", "HEAD /readyz HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"},
	{"HTTP/1.0 close", "GET /healthz HTTP/1.0\r\nConnection: close\r\n\r\n"},
	{"a pipelined request", "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /readyz HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"bytes after the header", "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nhello"},
	{"a blank line after the header", "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n\r\n"},
	{"PRI", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"},
}

func TestParsePlainProbe(t *testing.T) {
	for _, raw := range plainProbeRequests() {
		p, ok := parsePlainProbe([]byte(raw))
		require.True(t, ok, "%q", raw)
		method, target, _ := strings.Cut(raw, " ")
		target, version, _ := strings.Cut(target, " ")
		path, query, _ := strings.Cut(target, "?")
		assert.Equal(t, method, p.method, "%q", raw)
		assert.Equal(t, path, p.path, "%q", raw)
		assert.Equal(t, query, string(p.rawQuery), "%q", raw)
		assert.Equal(t, strings.HasPrefix(version, "HTTP/1.0"), p.http10, "%q", raw)
	}
	for _, tc := range notPlainProbes {
		_, ok := parsePlainProbe([]byte(tc.raw))
		assert.False(t, ok, "%s: %q", tc.name, tc.raw)
	}
}

// answerStates are Servers in every state of serverStates, which reach
// every row of the readiness table and both verbose shapes of ready.
func answerStates() []func(*Server) {
	var states []func(*Server)
	for _, row := range serverStates {
		states = append(states, row.set)
	}
	return states
}

// serveReference serves s's handler on a fresh loopback listener as
// serveNetHTTP does.
func serveReference(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	serveNetHTTP(t, s, ln)
	return ln.Addr().String()
}

// serveNetHTTP serves s's handler on ln, until the test's end, with the
// http.Server Serve uses, configured alike, but without the limiter and so
// without the short path: net/http's answers, as they were before it.
func serveNetHTTP(t testing.TB, s *Server, ln net.Listener) {
	srv := s.httpServer(nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
}

var dateHeader = regexp.MustCompile("\r\nDate: [^\r\n]*\r\n")

// maskDate replaces the value of an answer's Date header, the one part two
// answers to the same request may differ in, after checking that it is a
// date of now in net/http's format.
func maskDate(t testing.TB, answer string) string {
	t.Helper()
	m := dateHeader.FindStringIndex(answer)
	if m == nil {
		return answer
	}
	value := answer[m[0]+len("\r\nDate: ") : m[1]-len("\r\n")]
	date, err := time.Parse(http.TimeFormat, value)
	if err != nil || time.Since(date).Abs() > time.Minute || date.UTC().Format(http.TimeFormat) != value {
		t.Fatalf("Date %q is not now in http.TimeFormat", value)
	}
	return answer[:m[0]] + "\r\nDate: (masked)\r\n" + answer[m[1]:]
}

// TestShortPathMatchesNetHTTP is the differential test: in every readiness
// state, every request of the short path's shapes, and every request it
// must leave to net/http, is answered by Serve with the bytes net/http
// writes for it, but the Date value. (That the first are answered at
// accept and the others reach net/http is TestShortPathTakesOnlyPlainProbes.)
func TestShortPathMatchesNetHTTP(t *testing.T) {
	reqs := plainProbeRequests()
	for _, tc := range notPlainProbes {
		reqs = append(reqs, tc.raw)
	}
	for i, set := range answerStates() {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			s, logs := newTestServer(t)
			set(s)
			addr, _ := startServing(t, s)
			reference := serveReference(t, s)
			exchange(t, addr, reqs[0]) // Serve has logged its start
			before := logs.String()
			for _, raw := range reqs {
				want := maskDate(t, exchange(t, reference, raw))
				got := maskDate(t, exchange(t, addr, raw))
				require.Equal(t, want, got, "%q", raw)
			}
			assert.Equal(t, before, logs.String(), "nothing is logged per request")
		})
	}
}

// TestShortPathCounts sends plain probes of every kind and checks that
// Status counts each answer and each connection exactly once, as the
// handler and the limiter do for the requests that reach net/http.
func TestShortPathCounts(t *testing.T) {
	s, _ := newTestServer(t)
	addr, _ := startServing(t, s)
	const n = 7
	send := func(raw string, times int) {
		for range times {
			exchange(t, addr, raw)
		}
	}
	send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", n)
	send("HEAD /healthz?verbose HTTP/1.0\r\n\r\n", n)
	send("GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n", n)
	send("HEAD /readyz?verbose HTTP/1.0\r\n\r\n", n)
	s.SetRegistered()
	s.SetDataPlaneReady()
	send("GET /readyz?verbose HTTP/1.1\r\nHost: x\r\n\r\n", n)
	send("HEAD /readyz HTTP/1.1\r\nHost: x\r\n\r\n", n)
	send("GET /readyz HTTP/1.0\r\n\r\n", n)
	// And, for comparison, requests net/http answers.
	send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", n)
	send("GET /healthz HTTP/1.1\nHost: x\n\n", n)
	send("POST /readyz HTTP/1.1\r\nHost: x\r\n\r\n", n)
	eventually(t, func() bool { return s.Status().Conns.Held == 0 }, "every connection released")

	st := s.Status()
	assert.Equal(t, ProbeCounts{Liveness: 3 * n, ReadyOK: 3 * n, ReadyNotReady: 2 * n, Other: 2 * n}, st.Probes)
	assert.Equal(t, uint64(10*n), st.Conns.Accepted)
	assert.Zero(t, st.Conns.Evicted)
}

// TestShortPathClosesCleanly checks the close of a connection answered at
// accept under a burst: each client writes its request, waits until the
// server has answered and closed every connection, and only then reads.
// It must read the whole answer and a clean EOF: had the server closed
// with the request unread, the kernel would have reset the connection and
// the answer would be lost.
func TestShortPathClosesCleanly(t *testing.T) {
	s, _ := newTestServer(t)
	s.SetRegistered()
	s.SetDataPlaneReady()
	addr, _ := startServing(t, s)
	const clients = 200
	req := "GET /readyz?verbose HTTP/1.1\r\nHost: x\r\n" + manyHeaders(40) + "\r\n"
	conns := make([]net.Conn, clients)
	var wg sync.WaitGroup
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", addr)
			if !assert.NoError(t, err) {
				return
			}
			conns[i] = c
			_, err = io.WriteString(c, req)
			assert.NoError(t, err)
		}()
	}
	wg.Wait()
	eventually(t, func() bool { return s.Status().Conns.Accepted == clients }, "every connection accepted")
	// Accept takes one connection at a time, so once one more probe is
	// answered, every connection before it has been answered and closed.
	exchange(t, addr, req)
	assert.Equal(t, uint64(clients+1), s.Status().Probes.ReadyOK)
	for _, c := range conns {
		if c == nil {
			continue
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		answer, err := io.ReadAll(c)
		require.NoError(t, err, "EOF, not a reset")
		assert.True(t, strings.HasPrefix(string(answer), "HTTP/1.1 200 OK\r\n"), "%q", answer)
		assert.True(t, strings.HasSuffix(string(answer), "\r\n\r\n"+verboseReadyBody), "%q", answer)
		_ = c.Close()
	}
}

const verboseReadyBody = "[+]registration ok\n[+]data-plane ok\n[+]event-delivery ok\n[+]subsystems ok\nreadyz check passed\n"

func TestShortPathDate(t *testing.T) {
	sp := newShortPath(NewServer(Config{}, discardLogger()))
	at := time.Date(2026, 12, 3, 7, 24, 38, 0, time.FixedZone("CET", 3600))
	for _, now := range []time.Time{at, at.Add(999 * time.Millisecond), at.Add(time.Second), at.Add(-time.Second), time.Unix(0, 0)} {
		assert.Equal(t, now.UTC().Format(http.TimeFormat), string(sp.dateOf(now)))
	}
}

// TestShortPathAllocatesNothing: building an answer allocates nothing, for
// a query of up to 32 bytes (a longer one costs one allocation of its
// length, to look for the key verbose).
func TestShortPathAllocatesNothing(t *testing.T) {
	s := probeServer(true, false)
	sp := newShortPath(s)
	for _, raw := range []string{
		benchRequest,
		"HEAD /readyz?x=1&verbose HTTP/1.0\r\n\r\n",
		"GET /healthz HTTP/1.1\r\nHost: x\r\n" + manyHeaders(60) + "\r\n",
	} {
		buf := make([]byte, maxRequestBytes)
		n := copy(buf, raw)
		allocs := testing.AllocsPerRun(1000, func() {
			_, _, ok := sp.plainAnswer(buf, n)
			require.True(t, ok)
		})
		assert.Zero(t, allocs, "%q", raw)
	}
}

// BenchmarkShortPath measures what the short path does for a kubelet's
// probe besides its system calls: parse, route, count and build the
// answer.
func BenchmarkShortPath(b *testing.B) {
	s := probeServer(true, false)
	sp := newShortPath(s)
	buf := make([]byte, maxRequestBytes)
	n := copy(buf, benchRequest)
	b.ReportAllocs()
	for b.Loop() {
		_, counter, ok := sp.plainAnswer(buf, n)
		if !ok {
			b.Fatal("not a plain probe")
		}
		counter.Add(1)
	}
}

// pipeListener hands net/http the server ends of in-memory connections,
// so that a fuzz target can have net/http answer thousands of requests a
// second without a socket each.
type pipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// exchange sends raw to net/http over a fresh in-memory connection and
// returns all it answers before it closes the connection.
func (l *pipeListener) exchange(t testing.TB, raw []byte) string {
	client, server := net.Pipe()
	defer client.Close()
	select {
	case l.conns <- server:
	case <-l.closed:
		t.Fatal("listener closed")
	}
	go func() {
		// net/http may close before it has read everything.
		_, _ = client.Write(raw)
	}()
	_ = client.SetReadDeadline(time.Now().Add(10 * time.Second))
	answer, err := io.ReadAll(client)
	if err != nil && !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("%q: %v", raw, err)
	}
	return string(answer)
}

// serveOnPipes serves s's handler as serveNetHTTP does, on a
// pipeListener.
func serveOnPipes(t testing.TB, s *Server) *pipeListener {
	l := newPipeListener()
	serveNetHTTP(t, s, l)
	return l
}

// silentConn fails the test on any use: what the short path does not take
// it must not touch.
type silentConn struct {
	net.Conn
	t testing.TB
}

func (c silentConn) Read([]byte) (int, error)  { c.t.Fatal("read"); return 0, nil }
func (c silentConn) Write([]byte) (int, error) { c.t.Fatal("write"); return 0, nil }
func (c silentConn) Close() error              { c.t.Fatal("close"); return nil }

// FuzzShortPath gives arbitrary request bytes to the short path's parser,
// in every readiness state. Whatever the parser takes, net/http (the
// http.Server Serve uses, on an in-memory connection) must answer with the
// very bytes the short path builds, but the Date value, and count it in
// the same counter; whatever it does not take, the short path must leave
// untouched, for net/http.
func FuzzShortPath(f *testing.F) {
	for i, raw := range plainProbeRequests() {
		if i%8 == 0 { // every shape, a fraction of each
			f.Add([]byte(raw))
		}
	}
	for _, tc := range notPlainProbes {
		f.Add([]byte(tc.raw))
	}
	f.Add([]byte(benchRequest))

	type server struct {
		s         *Server
		sp        *shortPath
		reference *pipeListener
	}
	var servers []server
	for _, set := range answerStates() {
		s := NewServer(Config{}, discardLogger())
		set(s)
		servers = append(servers, server{s, newShortPath(s), serveOnPipes(f, s)})
	}

	f.Fuzz(func(t *testing.T, raw []byte) {
		buf := make([]byte, maxRequestBytes)
		n := copy(buf, raw)
		for _, srv := range servers {
			before := srv.s.Status().Probes
			answer, counter, ok := srv.sp.plainAnswer(buf, n)
			if srv.s.Status().Probes != before {
				t.Fatalf("%q: counted by plainAnswer, before any read", raw)
			}
			if !ok {
				if srv.sp.answer(nil, silentConn{t: t}, buf, n) {
					t.Fatalf("%q: answered at accept", raw)
				}
				continue
			}
			got := maskDate(t, string(answer))
			counted := counter.Load()
			want := maskDate(t, srv.reference.exchange(t, raw))
			if got != want {
				t.Fatalf("%q:\nnet/http:   %q\nshort path: %q", raw, want, got)
			}
			// net/http counted it once, in the counter the short path
			// would have counted it in.
			if d := diffProbes(before, srv.s.Status().Probes); counter.Load() != counted+1 || d.Liveness+d.ReadyOK+d.ReadyNotReady+d.Other != 1 {
				t.Fatalf("%q: net/http counted %+v, not once in the short path's counter", raw, d)
			}
		}
	})
}

func diffProbes(a, b ProbeCounts) ProbeCounts {
	return ProbeCounts{
		Liveness:      b.Liveness - a.Liveness,
		ReadyOK:       b.ReadyOK - a.ReadyOK,
		ReadyNotReady: b.ReadyNotReady - a.ReadyNotReady,
		Other:         b.Other - a.Other,
	}
}

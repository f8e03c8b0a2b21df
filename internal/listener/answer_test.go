package listener

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshnode/health/internal/probetest"
)

// probeRequest is the kubelet's probe, as it sends it.
const probeRequest = "GET /readyz HTTP/1.1\r\nHost: 127.0.0.1:9101\r\nUser-Agent: kube-probe/1.31\r\nAccept: */*\r\nConnection: close\r\n\r\n"

// serveReference serves p as Serve's net/http does, but without the
// limiter and so without the short path, on ln, or a fresh loopback
// listener for a nil ln.
func serveReference(t testing.TB, p *fakeProbes, ln net.Listener) string {
	t.Helper()
	return probetest.ServeHTTP(t, newHTTPServer(p, discardLog), ln)
}

// TestShortPathMatchesNetHTTP is the differential test: ready and not,
// every request of the short path's shapes, and every request it must
// leave to net/http, is answered by Serve with the bytes net/http writes
// for it, but the Date value, and counted alike. (The root's test of the
// same name runs it with the package's own handler.)
func TestShortPathMatchesNetHTTP(t *testing.T) {
	reqs := probetest.PlainProbes()
	for _, tc := range append(probetest.OtherRequests, probetest.NetHTTPRequests...) {
		reqs = append(reqs, tc.Raw)
	}
	for _, ready := range []bool{false, true} {
		t.Run(map[bool]string{false: "not ready", true: "ready"}[ready], func(t *testing.T) {
			s := serveTest(t, nil, Options{})
			s.probes.ready.Store(ready)
			reference := new(fakeProbes)
			reference.ready.Store(ready)
			refAddr := serveReference(t, reference, nil)
			for _, raw := range reqs {
				want := probetest.MaskDate(t, probetest.ExchangeShut(t, refAddr, raw, time.Second))
				got := probetest.MaskDate(t, probetest.ExchangeShut(t, s.addr, raw, time.Second))
				require.Equal(t, want, got, "%q", raw)
			}
			assert.Equal(t, reference.liveness.Load(), s.probes.liveness.Load())
			assert.Equal(t, reference.readiness.Load(), s.probes.readiness.Load())
			assert.Equal(t, reference.other.Load(), s.probes.other.Load())
			assert.Empty(t, s.logs.String(), "nothing is logged per request")
		})
	}
}

// TestShortPathClosesCleanly checks the close of a connection answered by
// the short path under a burst: each client writes its request, waits
// until the server has answered every connection, and only then reads.
// It must read the whole answer and a clean EOF: had the server closed
// with the request unread, the kernel would have reset the connection and
// the answer would be lost.
func TestShortPathClosesCleanly(t *testing.T) {
	s := serveTest(t, nil, Options{})
	const clients = 200
	req := "GET /readyz?verbose HTTP/1.1\r\nHost: x\r\n" + probetest.ManyHeaders(40) + "\r\n"
	conns := dialAll(t, s.addr, clients, req)
	probetest.Eventually(t, func() bool { return s.probes.readiness.Load() == clients }, "every client answered")
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		answer, err := io.ReadAll(c)
		require.NoError(t, err, "EOF, not a reset")
		assert.True(t, strings.HasPrefix(string(answer), "HTTP/1.1 200 OK\r\n"), "%q", answer)
		assert.True(t, strings.HasSuffix(string(answer), "\r\n\r\n"+string(fakeOK.resp.Body)), "%q", answer)
		_ = c.Close()
	}
}

func TestShortPathDate(t *testing.T) {
	r := newReader(new(fakeProbes).answer)
	at := time.Date(2026, 12, 3, 7, 24, 38, 0, time.FixedZone("CET", 3600))
	for _, now := range []time.Time{at, at.Add(999 * time.Millisecond), at.Add(time.Second), at.Add(-time.Second), time.Unix(0, 0)} {
		assert.Equal(t, now.UTC().Format(http.TimeFormat), string(r.dateOf(now)))
	}
}

// TestShortPathAllocatesNothing: building an answer allocates nothing of
// the short path's own, for a query of up to 32 bytes (the root's
// handler then looks for the key verbose in it without allocating).
func TestShortPathAllocatesNothing(t *testing.T) {
	r := newReader(new(fakeProbes).answer)
	for _, raw := range []string{
		probeRequest,
		"HEAD /readyz?x=1&verbose HTTP/1.0\r\n\r\n",
		"GET /healthz HTTP/1.1\r\nHost: x\r\n" + probetest.ManyHeaders(60) + "\r\n",
	} {
		req := []byte(raw)
		allocs := testing.AllocsPerRun(1000, func() {
			_, _, _, ok := r.respond(req)
			require.True(t, ok)
		})
		assert.Zero(t, allocs, "%q", raw)
	}
}

// BenchmarkShortPath measures what the short path does for a kubelet's
// probe besides its system calls: parse, route, count and build the
// answer.
func BenchmarkShortPath(b *testing.B) {
	r := newReader(new(fakeProbes).answer)
	req := []byte(probeRequest)
	b.ReportAllocs()
	for b.Loop() {
		_, counter, _, ok := r.respond(req)
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

// serveOnPipes serves p as serveReference does, on a pipeListener, but
// that a request's body is never read after its answer, as Serve's slots
// never read one (stopReading): a pipe cannot be shut, so a body never
// sent would hold each answer until the read timeout.
func serveOnPipes(t testing.TB, p *fakeProbes) *pipeListener {
	l := newPipeListener()
	srv := newHTTPServer(p, discardLog)
	srv.ConnState = func(nc net.Conn, state http.ConnState) {
		if state == http.StateActive {
			stopReading(nc)
		}
	}
	probetest.ServeHTTP(t, srv, l)
	return l
}

// FuzzShortPath gives arbitrary request bytes to the short path's parser,
// ready and not. Whatever the parser takes, net/http (the http.Server
// Serve uses, on an in-memory connection) must answer with the very bytes
// the short path builds, but the Date value, and count it in the same
// counter; whatever it does not take is net/http's.
func FuzzShortPath(f *testing.F) {
	for i, raw := range probetest.PlainProbes() {
		if i%8 == 0 { // every shape, a fraction of each
			f.Add([]byte(raw))
		}
	}
	for _, tc := range append(probetest.OtherRequests, probetest.NetHTTPRequests...) {
		f.Add([]byte(tc.Raw))
	}
	f.Add([]byte(probeRequest))

	type server struct {
		p         *fakeProbes
		r         *reader
		reference *pipeListener
	}
	var servers []server
	for _, ready := range []bool{false, true} {
		p := new(fakeProbes)
		p.ready.Store(ready)
		servers = append(servers, server{p, newReader(p.answer), serveOnPipes(f, p)})
	}

	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) >= maxRequestBytes {
			return // past the peek's buffer: refused before any parse
		}
		for _, srv := range servers {
			before := srv.p.answered()
			answer, counter, req, ok := srv.r.respond(raw)
			if srv.p.answered() != before {
				t.Fatalf("%q: counted by respond, before any read", raw)
			}
			if !ok {
				continue
			}
			got := probetest.MaskDate(t, string(answer))
			counted := counter.Load()
			want := probetest.MaskDate(t, srv.reference.exchange(t, raw))
			if got != want {
				t.Fatalf("%q:\nnet/http:   %q\nshort path: %q", raw, want, got)
			}
			// net/http counted it once, in the counter the short path
			// would have counted it in.
			if req.expectFailed { // net/http's 417, which no handler counts
				if srv.p.answered() != before {
					t.Fatalf("%q: a 417 counted", raw)
				}
				continue
			}
			if counter.Load() != counted+1 || srv.p.answered() != before+1 {
				t.Fatalf("%q: net/http did not count it once in the short path's counter", raw)
			}
		}
	})
}

// TestPartialHeadersAsNetHTTP: a header that never ends gets from Serve
// what it gets from net/http, and when: a request line or header line
// net/http cannot parse, its 400 at once; a line cut off by the header
// deadline, at the deadline, the 400 if net/http refuses it taken as
// whole, and otherwise nothing; each ending in a clean close (a FIN).
func TestPartialHeadersAsNetHTTP(t *testing.T) {
	s := serveTest(t, nil, Options{})
	ref := serveReference(t, s.probes, nil)
	cases := []struct {
		name, send string
		atOnce     [2]bool // net/http's answer, Serve's, comes before the deadline
	}{
		{"a request line net/http cannot parse", "GARBAGE\r\n", [2]bool{true, true}},
		{"a blank line first", "\r\n", [2]bool{true, true}},
		{"a header line without a colon", "GET /readyz HTTP/1.1\r\nBad Header\r\n", [2]bool{true, true}},
		{"a header line without a name, and a byte after it", "GET /readyz HTTP/1.1\r\nHost: x\r\n: x\r\nX", [2]bool{true, true}},
		// net/http waits for the byte that says whether a continuation
		// line follows; Serve does not (see refusedByNetHTTP).
		{"a header line without a name, and nothing after it", "GET /readyz HTTP/1.1\r\nHost: x\r\n: x\r\n", [2]bool{false, true}},
		{"a bad line, then 70 more", "GET /readyz HTTP/1.1\r\nBad\r\n" + strings.Repeat("X-A: b\r\n", 70), [2]bool{true, true}},
		{"a bad line after 63 bare-LF lines", "GET /readyz HTTP/1.1\n" + strings.Repeat("X: y\n", 63) + "Bad\n", [2]bool{true, true}},
		{"a request line cut off", "GET /rea", [2]bool{}},
		{"a byte of a request line", "G", [2]bool{}},
		{"a header line cut off, unparsable", "GET /readyz HTTP/1.1\r\nHo", [2]bool{}},
		{"a blank line cut off after its CR", partialProbe, [2]bool{}},
		{"a header line cut off, parsable", "GET /readyz HTTP/1.1\r\nHost: x\r\nX-a: b", [2]bool{}},
		{"whole lines only", "GET /readyz HTTP/1.1\r\nHost: x\r\n", [2]bool{}},
		{"a request line cut off at its end", "GET /readyz HTTP/1.1", [2]bool{}},
	}
	type result struct {
		answer string
		err    error
		took   time.Duration
	}
	send := func(addr, raw string) (r result) {
		start := time.Now()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return result{err: err}
		}
		defer c.Close()
		_, _ = io.WriteString(c, raw)
		_ = c.SetReadDeadline(time.Now().Add(2 * headerTimeout))
		got, err := io.ReadAll(c)
		return result{string(got), err, time.Since(start)}
	}
	results := make([][2]result, len(cases))
	var wg sync.WaitGroup
	for i, tc := range cases {
		for j, addr := range [...]string{ref, s.addr} {
			wg.Go(func() { results[i][j] = send(addr, tc.send) })
		}
	}
	wg.Wait()
	for i, tc := range cases {
		assert.Equal(t, results[i][0].answer, results[i][1].answer, "%s: %q", tc.name, tc.send)
		if tc.atOnce[0] {
			assert.Equal(t, response400, results[i][0].answer, "%s: net/http", tc.name)
		}
		for j, r := range results[i] {
			server := [...]string{"net/http", "Serve"}[j]
			assert.NoError(t, r.err, "%s: %s: a clean close", tc.name, server)
			if tc.atOnce[j] {
				assert.Less(t, r.took, headerTimeout/2, "%s: %s answered late", tc.name, server)
			} else {
				assert.GreaterOrEqual(t, r.took, headerTimeout, "%s: %s before the deadline", tc.name, server)
				assert.Less(t, r.took, headerTimeout+time.Second, "%s: %s long after the deadline", tc.name, server)
			}
		}
	}
}

// TestParsesAreBudgeted: net/http's parser judges a header only while the
// connection has parses left; then the verdict waits for the deadline,
// where it has one more.
func TestParsesAreBudgeted(t *testing.T) {
	r := newReader(nil)
	n := copy(r.buf, "GET / HTTP/1.1\r\nX: \x80\r\n: x\r\n") // obs-text net/http takes, then a line it refuses
	parses := uint8(1)
	assert.True(t, r.refusedByNetHTTP(n, false, &parses))
	assert.Zero(t, parses)
	assert.False(t, r.refusedByNetHTTP(n, false, &parses), "no parse left")
	last := uint8(1)
	assert.True(t, r.refusedByNetHTTP(n, true, &last), "at the deadline")
}

// BenchmarkRefusedByNetHTTP is the cost of one of net/http's parses of a
// partial header the room cannot vouch for: 62 header lines of obs-text,
// which net/http takes, under the 64-line cap.
func BenchmarkRefusedByNetHTTP(b *testing.B) {
	r := newReader(nil)
	n := copy(r.buf, "GET /healthz HTTP/1.1\r\nHost: x\r\n"+strings.Repeat("X-a: "+strings.Repeat("\x80", 50)+"\r\n", 62)+"X")
	b.ReportAllocs()
	for b.Loop() {
		parses := uint8(1)
		if r.refusedByNetHTTP(n, false, &parses) {
			b.Fatal("refused")
		}
	}
}

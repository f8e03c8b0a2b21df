package health

import (
	"bufio"
	"context"

	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshnode/health/internal/probetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestServeOverTCP(t *testing.T) {
	s, logs := newTestServer(t)
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
	status, body, err = kubeletProbe(addr, "/readyz?verbose")
	require.NoError(t, err)
	assert.Equal(t, 200, status)
	assert.Equal(t, "[+]registration ok\n[+]data-plane ok\n[+]event-delivery ok\n[+]subsystems ok\nreadyz check passed\n", body)
	limit := s.Status().Conns.Limit
	assert.Positive(t, limit)

	assert.NoError(t, stop())
	assert.Zero(t, s.Status().Conns.Limit, "no Serve running")
	// One line when Serve starts, naming the address and the bound, and
	// one when it has stopped; none per request.
	assert.Equal(t, 1, logs.count(fmt.Sprintf(`level=INFO msg="health: serving probes" addr=%s limit=%d`, addr, limit)), logs.String())
	assert.Equal(t, 1, logs.count(fmt.Sprintf(`level=INFO msg="health: stopped serving probes" addr=%s`, addr)), logs.String())
	assert.Equal(t, 2, logs.count("serving probes"))
}

func TestListenAddressInUse(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	s := NewServer(Config{Listen: taken.Addr().String()}, discardLogger())
	ln, err := s.Listen()
	require.Error(t, err)
	assert.Nil(t, ln)
	assert.ErrorIs(t, err, syscall.EADDRINUSE)
	var opErr *net.OpError
	assert.ErrorAs(t, err, &opErr, "the system's error is still reachable")
	assert.Contains(t, err.Error(), strconv.Quote(taken.Addr().String()))
	assert.Equal(t, 1, strings.Count(err.Error(), "address already in use"), "said once: %q", err)
	assert.Contains(t, err.Error(), "hostNetwork")
}

// TestListenErrorQuotesAddress binds an address this machine does not have
// (TEST-NET-1, never routed; binding sends nothing): the error names the
// address quoted, like every error that carries a value.
func TestListenErrorQuotesAddress(t *testing.T) {
	s := NewServer(Config{Listen: "192.0.2.1:0"}, discardLogger())
	ln, err := s.Listen()
	if err == nil {
		_ = ln.Close()
		t.Skip("this machine holds 192.0.2.1")
	}
	assert.True(t, strings.HasPrefix(err.Error(), `health: listen "192.0.2.1:0": `), "%q", err)
}

func TestListenRejectsBadConfig(t *testing.T) {
	s := NewServer(Config{Listen: "127.0.0.1:99999"}, discardLogger())
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
			logs.server = s // the warning is queued: count once it is written
			ln, err := s.Listen()
			require.NoError(t, err)
			_ = ln.Close()
			assert.Equal(t, tc.warns, logs.count(`level=WARN msg="health: listening on a non-loopback address; the probe endpoints are unauthenticated"`))
		})
	}
}

func TestDisabled(t *testing.T) {
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
	goleak.VerifyNone(t) // what this test is about: Serve left nothing running
	for i, c := range clients {
		if i%2 != 0 {
			continue // never accepted: the kernel holds it, the listener is gone
		}
		assertClosedByServer(t, c, "client %d", i)
	}
}

// TestStalledConnectionIsClosed sends half a request: the header timeout,
// 2 s from accept, closes the connection unanswered, not before and at
// most a second after.
func TestStalledConnectionIsClosed(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the header timeout, 2 s")
	}
	const headerTimeout = 2 * time.Second // the contract's
	addr := serveReady(t)
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	start := time.Now() // before the accept, which the request's first byte brings
	_, err = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n")
	require.NoError(t, err)
	_ = c.SetReadDeadline(start.Add(headerTimeout + time.Second))
	got, err := io.ReadAll(c)
	elapsed := time.Since(start)
	require.NoError(t, err, "closed within a second of the header timeout")
	assert.Empty(t, got, "closed unanswered")
	assert.GreaterOrEqual(t, elapsed, headerTimeout, "closed before the header timeout")
}

func TestOneRequestPerConnection(t *testing.T) {
	addr := serveReady(t)
	got := exchange(t, addr, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	assert.Equal(t, 1, strings.Count(got, "HTTP/1.1 "), "one answer, then close:\n%s", got)
	assert.Contains(t, got, "\r\nConnection: close\r\n")
	assert.True(t, strings.HasSuffix(got, "\r\n\r\nok\n"))
}

// TestHostileRequestsLogNothing sends malformed and hostile requests over
// TCP: each gets one of the constant answers, and none of them writes a
// line to the agent's log.
func TestHostileRequestsLogNothing(t *testing.T) {
	s, logs := newTestServer(t)
	addr, stop := startServing(t, s)
	defer stop()
	exchange(t, addr, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n") // Serve has logged its start
	before := logs.String()

	tests := []struct{ raw, status string }{
		{"GET /readyz?a=1;b=2 HTTP/1.1\r\nHost: x\r\n\r\n", "503"},
		{"GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", "200"},
		{"GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n", "400"},
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
		{"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "400"},
	}
	for _, tc := range tests {
		got := exchange(t, addr, tc.raw)
		assert.True(t, strings.HasPrefix(got, "HTTP/1.1 "+tc.status+" "), "%q: got %q", tc.raw, got)
	}
	assert.Equal(t, before, logs.String(), "nothing is logged per request")
}

// TestOptionsStarIsOurs checks that OPTIONS * reaches the probe handler,
// which answers 404 with the package's headers: net/http's own handler
// answers 200 with none of them, after reading any body first.
func TestOptionsStarIsOurs(t *testing.T) {
	addr := serveReady(t)
	for _, raw := range []string{
		"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
		"OPTIONS * HTTP/1.1\r\nHost: x\r\nContent-Length: 4096\r\n\r\n", // the body never comes
	} {
		resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(exchange(t, addr, raw))), nil)
		require.NoError(t, err, "%q", raw)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		assert.Equal(t, 404, resp.StatusCode, "%q", raw)
		assert.Equal(t, "404 page not found\n", string(body), "%q", raw)
		for name, want := range map[string]string{
			"Content-Type":           "text/plain; charset=utf-8",
			"X-Content-Type-Options": "nosniff",
			"Cache-Control":          "no-store",
			"Content-Length":         "19",
		} {
			assert.Equal(t, want, resp.Header.Get(name), "%q: %s", raw, name)
		}
	}
}

// TestServeAnswersProbesAsNetHTTP is the differential test: in every state
// of serverStates, every request of a probe's shapes gets from Serve the
// bytes a plain http.Server serving Handler writes for it, but the Date
// value.
func TestServeAnswersProbesAsNetHTTP(t *testing.T) {
	for _, st := range serverStates {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel() // each state its own pair of servers: exchanges wait on the network, not the CPU
			s, logs := newTestServer(t)
			st.set(s)
			addr, _ := startServing(t, s)
			plainAddr := probetest.ServeHTTP(t, probetest.PlainServer(s.Handler()))
			exchange(t, addr, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n") // Serve has logged its start
			before := logs.String()
			for _, raw := range probetest.Probes() {
				want := probetest.MaskDate(t, exchange(t, plainAddr, raw))
				got := probetest.MaskDate(t, exchange(t, addr, raw))
				require.Equal(t, want, got, "%q", raw)
			}
			assert.Equal(t, before, logs.String(), "nothing is logged per request")
		})
	}
}

// FuzzServeAsNetHTTP is the differential test's fuzz target: a request of
// a probe's shape (any method token, any target a client library writes,
// either version, one of the header sets) gets the same bytes from Serve
// as from a plain http.Server serving Handler, but the Date value.
func FuzzServeAsNetHTTP(f *testing.F) {
	for _, seed := range []struct {
		method, target string
		http10         bool
		headers        uint8
	}{
		{"GET", "/readyz?verbose&exclude=registration", false, 0},
		{"HEAD", "http://127.0.0.1:9101/healthz", true, 1},
		{"POST", "/readyz/data-plane", false, 2},
		{"OPTIONS", "*", false, 3},
		{"GET", "/%72eadyz?x=%zz", false, 0},
	} {
		f.Add(seed.method, seed.target, seed.http10, seed.headers)
	}
	s := NewServer(Config{Listen: "127.0.0.1:0"}, discardLogger())
	s.SetRegistered()
	headerSets := []string{
		"Host: 127.0.0.1:9101\r\nUser-Agent: kube-probe/1.31\r\nAccept: */*\r\nConnection: close\r\n",
		"Host: x\r\nAccept-Encoding: gzip\r\nX-Custom: a b\tc\r\n",
		"host: [::1]:9101\r\nconnection: keep-alive\r\nContent-Length: 0\r\n",
		"",
	}
	addr, _ := startServing(f, s)
	plainAddr := probetest.ServeHTTP(f, probetest.PlainServer(s.Handler()))
	f.Fuzz(func(t *testing.T, method, target string, http10 bool, headers uint8) {
		if !isToken(method) || !probeTarget(target) {
			t.Skip("not a probe's request")
		}
		version, h := "HTTP/1.1", headerSets[int(headers)%len(headerSets)]
		if http10 && strings.Contains(h, "keep-alive") {
			t.Skip("net/http's answer to HTTP/1.0 keep-alive differs by Go release (see probetest.Probes)")
		}
		if http10 {
			version = "HTTP/1.0"
		} else if h == "" {
			h = "Host: x\r\n"
		}
		raw := method + " " + target + " " + version + "\r\n" + h + "\r\n"
		want := probetest.MaskDate(t, exchange(t, plainAddr, raw))
		got := probetest.MaskDate(t, exchange(t, addr, raw))
		if got != want {
			t.Fatalf("%q:\nServe:\n%s\nnet/http:\n%s", raw, got, want)
		}
	})
}

// probeTarget reports whether target is one a client library writes: an
// origin-form path with well-formed escapes and any query, or an absolute
// http URL of a plain host, all in visible ASCII.
func probeTarget(target string) bool {
	for i := 0; i < len(target); i++ {
		if target[i] <= ' ' || target[i] > '~' {
			return false
		}
	}
	if rest, ok := strings.CutPrefix(target, "http://"); ok {
		host, path, _ := strings.Cut(rest, "/")
		hostname, port, hasPort := strings.Cut(host, ":")
		if !allBytes(hostname, func(b byte) bool { return isLetterOrDigit(b) || b == '.' || b == '-' }) ||
			hasPort && (port == "" || !allBytes(port, isDigit)) || strings.ContainsAny(hostname, "?#") {
			return false
		}
		target = "/" + path
	}
	path, _, _ := strings.Cut(target, "?")
	if !strings.HasPrefix(path, "/") {
		return target == "*"
	}
	_, err := url.PathUnescape(path)
	return err == nil
}

func isToken(s string) bool {
	return s != "" && allBytes(s, func(b byte) bool { return isLetterOrDigit(b) || strings.IndexByte("!#$%&'*+-.^_`|~", b) >= 0 })
}

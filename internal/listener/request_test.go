package listener

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshnode/health/internal/probetest"
)

func TestHeaderEnd(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"", -1},
		{"GET / HTTP/1.1\r\n", -1},
		{"GET / HTTP/1.1\r\nHost: x\r\n", -1},
		{"GET / HTTP/1.1\r\nHost: x\r\n\r", -1},
		{"GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27},
		{"GET / HTTP/1.1\r\nHost: x\r\n\r\nbody", 27},
		{"GET / HTTP/1.1\nHost: x\n\n", 24},
		{"GET / HTTP/1.1\r\nHost: x\n\r\n", 26},
		{"GET / HTTP/1.0\r\n\r\n", 18},
		{"\r\n\r\n", 4},
		{"\n\n", 2},
		{"\r\nGET / HTTP/1.1\r\n\r\n", 20},
	} {
		assert.Equal(t, tc.want, headerEnd([]byte(tc.in), 0), "%q", tc.in)
		// The same end, scanned as the bytes arrive one by one.
		got := -1
		for n := 1; n <= len(tc.in) && got < 0; n++ {
			got = headerEnd([]byte(tc.in[:n]), n-1)
		}
		assert.Equal(t, tc.want, got, "%q, a byte at a time", tc.in)
	}
}

// TestParseProbes: every request of a probe's shape is well formed, with
// no body, and the target is split as net/http splits it.
func TestParseProbes(t *testing.T) {
	for _, raw := range probetest.Probes() {
		req, ok := parseRequest([]byte(raw))
		require.True(t, ok, "%q", raw)
		assert.False(t, req.mayStillSend, "%q", raw)
	}
	for _, tc := range []struct {
		raw, method, path, query string
		http10                   bool
	}{
		{"GET /readyz?verbose HTTP/1.1\r\nHost: x\r\n\r\n", "GET", "/readyz", "verbose", false},
		{"HEAD /healthz HTTP/1.0\r\n\r\n", "HEAD", "/healthz", "", true},
		{"GET /healthz? HTTP/1.1\r\nHost: x\r\n\r\n", "GET", "/healthz", "", false},
		{"GET /readyz?a?b HTTP/1.1\r\nHost: x\r\n\r\n", "GET", "/readyz", "a?b", false},
		{"GET /%68ealthz HTTP/1.1\r\nHost: x\r\n\r\n", "GET", "/%68ealthz", "", false},
		{"GET http://127.0.0.1:9101/readyz?verbose HTTP/1.1\r\nHost: x\r\n\r\n", "GET", "/readyz", "verbose", false},
		{"GET HTTP://x HTTP/1.1\r\nHost: x\r\n\r\n", "GET", "", "", false},
		{"GET http://x?q HTTP/1.1\r\nHost: x\r\n\r\n", "GET", "", "q", false},
		{"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", "OPTIONS", "*", "", false},
		{"CONNECT 127.0.0.1:22 HTTP/1.1\r\nHost: x\r\n\r\n", "CONNECT", "127.0.0.1:22", "", false},
		{"GET /healthz HTTP/1.2\r\nHost: x\r\n\r\n", "GET", "/healthz", "", false},
		{"brew /x HTTP/1.1\r\nHost: x\r\n\r\n", "brew", "/x", "", false},
	} {
		req, ok := parseRequest([]byte(tc.raw))
		require.True(t, ok, "%q", tc.raw)
		assert.Equal(t, tc.method, string(req.method), "%q", tc.raw)
		assert.Equal(t, tc.path, string(req.path), "%q", tc.raw)
		assert.Equal(t, tc.query, string(req.rawQuery), "%q", tc.raw)
		assert.Equal(t, tc.http10, req.http10, "%q", tc.raw)
	}
}

// TestParseRefusesMalformed: a header that is not well formed is refused,
// whatever net/http makes of it.
func TestParseRefusesMalformed(t *testing.T) {
	for _, tc := range probetest.Malformed {
		end := headerEnd([]byte(tc.Raw), 0)
		require.Positive(t, end, "%s: a whole header", tc.Name)
		_, ok := parseRequest([]byte(tc.Raw[:end]))
		assert.False(t, ok, "%s: %q", tc.Name, tc.Raw)
	}
}

// TestParseMayStillSend: a request that declares a body or asks Expect is
// well formed and marked, so that the answer says "Connection: close" and
// the connection is held; "Content-Length: 0" declares none.
func TestParseMayStillSend(t *testing.T) {
	for _, tc := range probetest.MayStillSend {
		req, ok := parseRequest([]byte(tc.Raw[:headerEnd([]byte(tc.Raw), 0)]))
		require.True(t, ok, "%s", tc.Name)
		assert.True(t, req.mayStillSend, "%s", tc.Name)
	}
	for _, length := range []string{"0", "000"} {
		req, ok := parseRequest([]byte("GET /x HTTP/1.1\r\nHost: x\r\nContent-Length: " + length + "\r\ncontent-length: " + length + "\r\n\r\n"))
		require.True(t, ok)
		assert.False(t, req.mayStillSend, "Content-Length: %s", length)
	}
}

// TestParseAllocatesNothing: reading a header takes slices of it, nothing
// more, so that a flood of requests costs no garbage.
func TestParseAllocatesNothing(t *testing.T) {
	raw := []byte("GET http://127.0.0.1:9101/readyz?verbose HTTP/1.1\r\nHost: 127.0.0.1:9101\r\nUser-Agent: kube-probe/1.31\r\nAccept: */*\r\nContent-Length: 0\r\n\r\n")
	var ok bool
	assert.Zero(t, testing.AllocsPerRun(100, func() { _, ok = parseRequest(raw[:headerEnd(raw, 0)]) }))
	assert.True(t, ok)
}

// FuzzParseRequest: no input makes the parser panic, and what it takes is
// what the request line says: the method and target's bytes, in place.
func FuzzParseRequest(f *testing.F) {
	for _, raw := range probetest.Probes()[:40] {
		f.Add([]byte(raw))
	}
	for _, tc := range append(probetest.Malformed, probetest.MayStillSend...) {
		f.Add([]byte(tc.Raw))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		end := headerEnd(b, 0)
		if end < 0 {
			return
		}
		req, ok := parseRequest(b[:end])
		if !ok {
			return
		}
		line, _, _ := bytes.Cut(b, []byte("\r\n"))
		if !bytes.HasPrefix(line, append(req.method, ' ')) || !bytes.Contains(line, req.path) || !bytes.Contains(line, req.rawQuery) {
			t.Fatalf("%q: method %q, path %q, query %q", b, req.method, req.path, req.rawQuery)
		}
		if strings.ContainsAny(string(req.path)+string(req.rawQuery), " \r\n") {
			t.Fatalf("%q: a space or line end in the target", b)
		}
	})
}

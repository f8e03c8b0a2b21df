package hostile

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestClients(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range Clients() {
		assert.Regexp(t, "^[a-z0-9]+$", c.Name, "a flag's name")
		assert.NotEmpty(t, c.Help, c.Name)
		assert.False(t, seen[c.Name], "two clients named %s", c.Name)
		seen[c.Name] = true
		assert.NotContains(t, c.Request, "\n\n", "%s: lines end in CRLF", c.Name)
		found, ok := Find(c.Name)
		assert.True(t, ok, c.Name)
		assert.Equal(t, c, found)
	}
	_, ok := Find("nosuch")
	assert.False(t, ok)
	Clients()[0].Name = "changed"
	assert.Equal(t, "slowloris", Clients()[0].Name, "a copy")
}

// parseRequest reads the first request of s as net/http's server would,
// with no limit on the header.
func parseRequest(t *testing.T, s string) *http.Request {
	t.Helper()
	req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(s)))
	require.NoError(t, err)
	return req
}

func find(t *testing.T, name string) Client {
	t.Helper()
	c, ok := Find(name)
	require.True(t, ok, name)
	return c
}

func request(t *testing.T, name string) string {
	t.Helper()
	return find(t, name).Request
}

// Each request is what its help says.
func TestRequests(t *testing.T) {
	req := parseRequest(t, request(t, "options"))
	assert.Equal(t, "OPTIONS", req.Method)
	assert.Equal(t, "*", req.RequestURI)
	assert.EqualValues(t, 4096, req.ContentLength)

	big := request(t, "bigheader")
	head, _, found := strings.Cut(big, "\r\n\r\n")
	assert.True(t, found)
	assert.Greater(t, len(head), 4096+4096, "past MaxHeaderBytes and the 4 KiB net/http reads beyond it")
	assert.Less(t, len(head), 16<<10, "about 12 KiB")

	for name, length := range map[string]int64{"hugebody": 1 << 40, "hugebodyreset": 1 << 40, "smallbody": 1000, "smallbodyreset": 10} {
		req := parseRequest(t, request(t, name))
		assert.Equal(t, "POST", req.Method, name)
		assert.EqualValues(t, length, req.ContentLength, name)
		assert.True(t, strings.HasSuffix(request(t, name), "\r\n\r\n"), "%s: the header complete, the body absent", name)
	}
	assert.Equal(t, "100-continue", parseRequest(t, request(t, "expect")).Header.Get("Expect"))
	assert.Equal(t, "x", parseRequest(t, request(t, "expectother")).Header.Get("Expect"))
	assert.Len(t, parseRequest(t, request(t, "manyheaders")).Header["A"], 501)
	assert.Equal(t, []string{"chunked"}, parseRequest(t, request(t, "trailers")).TransferEncoding)
	assert.Contains(t, request(t, "trailers"), "\r\nTrailer: "+strings.Repeat("a,", 500)+"a\r\n", "501 trailer names")
	assert.Equal(t, []string{"chunked"}, parseRequest(t, request(t, "chunked")).TransferEncoding)

	// GET /healthz, as a probe sends it, with one thing a probe never
	// sends.
	for _, name := range []string{"getexpect", "gettrickle", "gethugebody", "bigheader"} {
		raw := request(t, name)
		assert.True(t, strings.HasPrefix(raw, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"), name)
		assert.True(t, strings.HasSuffix(raw, "\r\n\r\n"), "%s: the header complete, no body byte", name)
		req := parseRequest(t, raw)
		assert.Equal(t, "GET", req.Method, name)
		assert.Equal(t, "/healthz", req.URL.Path, name)
		assert.Equal(t, "127.0.0.1", req.Host, name)
	}
	expect := parseRequest(t, request(t, "getexpect"))
	assert.Equal(t, "100-continue", expect.Header.Get("Expect"))
	assert.EqualValues(t, 1000, expect.ContentLength)
	trickle := parseRequest(t, request(t, "gettrickle"))
	assert.Equal(t, []string{"chunked"}, trickle.TransferEncoding)
	assert.Empty(t, trickle.Header.Values("Content-Length"))
	assert.Equal(t, TrickleChunks, find(t, "gettrickle").Then)
	assert.EqualValues(t, 1<<40, parseRequest(t, request(t, "gethugebody")).ContentLength)
	for _, name := range []string{"getexpect", "gethugebody", "bigheader"} {
		assert.Equal(t, AwaitClose, find(t, name).Then, name)
	}

	r := bufio.NewReader(strings.NewReader(request(t, "pipeline")))
	n := 0
	for ; ; n++ {
		if _, err := http.ReadRequest(r); err != nil {
			break
		}
	}
	assert.Equal(t, pipelined, n)

	for _, name := range []string{"slowloris", "halfclose"} {
		assert.True(t, strings.HasPrefix(request(t, name), "GET /healthz HTTP/1.1\r\n"), name)
		assert.NotContains(t, request(t, name), "\r\n\r\n", "%s: a partial request", name)
	}
	assert.Equal(t, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", request(t, "h2"))
	assert.Equal(t, "GET", parseRequest(t, request(t, "noread")).Method)
	for _, name := range []string{"idle", "churn"} {
		assert.Empty(t, request(t, name), name)
	}
}

// The tls client sends one whole TLS record holding a ClientHello, with no
// newline an HTTP parser could take for a line.
func TestTLSClientHello(t *testing.T) {
	hello := []byte(request(t, "tls"))
	require.Greater(t, len(hello), 9)
	assert.Equal(t, byte(0x16), hello[0], "record type handshake")
	assert.Equal(t, byte(0x03), hello[1], "TLS major version")
	assert.Equal(t, len(hello)-5, int(hello[3])<<8|int(hello[4]), "the record is whole")
	assert.Equal(t, byte(0x01), hello[5], "handshake type ClientHello")
	assert.Equal(t, len(hello)-9, int(hello[6])<<16|int(hello[7])<<8|int(hello[8]), "the message is whole")
	assert.NotContains(t, string(hello), "\n")
}

// Run does what Then says, seen from the server's side of a connection.
func TestRun(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	for _, tc := range []struct {
		then Then
		// server plays the server's part and reports what it saw.
		server func(c net.Conn) string
		want   string
	}{
		{AwaitClose, func(c net.Conn) string { _, _ = io.WriteString(c, "answer"); return "" }, ""},
		{HalfClose, func(c net.Conn) string { b, _ := io.ReadAll(c); return string(b) + "|EOF" }, "req|EOF"},
		{Reset, func(c net.Conn) string { _, err := io.ReadAll(c); return "req|" + err.Error() }, "req|read tcp"},
		{CloseAtOnce, func(c net.Conn) string { b, _ := io.ReadAll(c); return string(b) + "|EOF" }, "req|EOF"},
	} {
		client, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		srv, err := ln.Accept()
		require.NoError(t, err)
		_ = srv.SetDeadline(time.Now().Add(10 * time.Second))
		done := make(chan struct{})
		go func() {
			defer close(done)
			Client{Request: "req", Then: tc.then}.Run(context.Background(), client)
			_ = client.Close()
		}()
		got := tc.server(srv)
		_ = srv.Close() // AwaitClose returns once the server closes
		<-done
		assert.True(t, strings.HasPrefix(got, tc.want), "then %d: %q", tc.then, got)
	}
}

// play runs cl against the server's end of a fresh loopback connection,
// which it returns, with a read deadline 10 s ahead; done closes once cl
// has returned and closed its end, which the server's close brings about.
func play(t *testing.T, cl Client) (srv net.Conn, done <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	srv, err = ln.Accept()
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		cl.Run(context.Background(), client)
		_ = client.Close()
	}()
	require.NoError(t, srv.SetReadDeadline(time.Now().Add(10*time.Second)))
	return srv, ended
}

// Trickle sends a header line every 1 to 3 s, and stops once closed.
func TestRunTrickle(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a trickled line, 1 to 3 s: skipped with -short")
	}
	srv, done := play(t, Client{Request: partialGet, Then: Trickle})
	r := bufio.NewReader(srv)
	var lines []string
	for len(lines) < 3 {
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		lines = append(lines, line)
	}
	assert.Equal(t, []string{"GET /healthz HTTP/1.1\r\n", "Host: 127.0.0.1\r\n", "X-Slow-0: 1\r\n"}, lines)
	_ = srv.Close()
	<-done
	assert.True(t, bytes.HasPrefix([]byte(lines[2]), []byte("X-Slow-")))
}

// TrickleBytes sends its lines a byte at a time, no faster than one every
// ByteEvery, and stops once closed.
func TestRunTrickleBytes(t *testing.T) {
	start := time.Now() // before the client's first write
	srv, done := play(t, Client{Request: "GET / HTTP/1.1\r\n", Then: TrickleBytes})
	want := "GET / HTTP/1.1\r\n" + trickledLine + trickledLine
	got := make([]byte, len(want))
	_, err := io.ReadFull(srv, got)
	require.NoError(t, err)
	assert.Equal(t, want, string(got))
	assert.GreaterOrEqual(t, time.Since(start), time.Duration(2*len(trickledLine))*ByteEvery, "a byte every ByteEvery at most")
	_ = srv.Close()
	<-done
}

// TrickleChunks sends a valid chunk of one byte every second, never the
// last: a server's chunked reader reads each and waits for the next. It
// stops once closed.
func TestRunTrickleChunks(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for two trickled chunks, 2 s: skipped with -short")
	}
	srv, done := play(t, find(t, "gettrickle"))
	req, err := http.ReadRequest(bufio.NewReader(srv))
	require.NoError(t, err)
	start := time.Now()
	var body [2]byte
	for i := range body {
		_, err := io.ReadFull(req.Body, body[i:i+1])
		require.NoError(t, err, "chunk %d", i)
	}
	elapsed := time.Since(start)
	assert.Equal(t, "xx", string(body[:]))
	assert.GreaterOrEqual(t, elapsed, chunkEvery, "a chunk a second, not both at once")
	_ = srv.Close()
	<-done
}

package listener

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/health/internal/hostile"
	"github.com/stretchr/testify/assert"

	"github.com/meshnode/health/internal/probetest"
	"github.com/stretchr/testify/require"
)

// TestResponse431IsNetHTTPs sends the same oversized requests to Serve and
// to a stock http.Server with Serve's MaxHeaderBytes, over TCP: both
// answer response431, byte for byte. A header over what net/http reads
// gets net/http's 431 from both. So, on a Go whose net/http caps header
// values (1.27 on), does a header over that cap, which Serve refuses for
// its lines; on an older Go, net/http lets it through.
func TestResponse431IsNetHTTPs(t *testing.T) {
	stock := &http.Server{Handler: http.NotFoundHandler(), MaxHeaderBytes: maxHeaderBytes, ReadHeaderTimeout: headerTimeout}
	stock.SetKeepAlivesEnabled(false) // as Serve: one request, then close
	stockAddr, healthAddr := probetest.ServeHTTP(t, stock, nil), serveTest(t, nil, Options{}).addr

	bigHeader := "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", maxHeaderBytes+4<<10) + "\r\n\r\n"
	assert.Equal(t, response431, exchange(t, stockAddr, bigHeader), "net/http")
	assert.Equal(t, response431, exchange(t, healthAddr, bigHeader), "Serve")

	// Go 1.27's net/http takes 500 values and refuses 501; before it, any.
	_, capsValues := reflect.TypeFor[http.Server]().FieldByName("MaxHeaderValueCount")
	for _, values := range []int{500, 501} {
		raw := "GET /healthz HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("a: 1\r\n", values-1) + "\r\n"
		stockGot, got := exchange(t, stockAddr, raw), exchange(t, healthAddr, raw)
		if capsValues && values > 500 {
			assert.Equal(t, response431, stockGot, "net/http, %d values", values)
			assert.Equal(t, response431, got, "Serve, %d values", values)
			continue
		}
		assert.True(t, strings.HasPrefix(stockGot, "HTTP/1.1 404 Not Found\r\n"), "net/http, %d values: %.40q", values, stockGot)
		assert.True(t, strings.HasPrefix(got, "HTTP/1.1 200 OK\r\n"), "Serve, %d values: %.40q", values, got)
	}
}

// TestOversizedHeaderNeverOK sends headers past the cap while it goes on
// writing, up to a megabyte: the answer is net/http's 431, whole, however
// much of the header the server saw before it refused it, and never an
// empty close.
func TestOversizedHeaderNeverOK(t *testing.T) {
	addr := serveTest(t, nil, Options{}).addr
	for _, tc := range []struct {
		name string
		size int
	}{{"a 9 KiB header", 9 << 10}, {"a 64 KiB header", 64 << 10}, {"a 1 MiB header", 1 << 20}} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			written := make(chan struct{})
			go func() {
				defer close(written)
				// The server may close before all is written; that is the point.
				_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: "+strings.Repeat("a", tc.size)+"\r\n\r\n")
			}()
			got, _ := io.ReadAll(c) // a reset may follow the answer: the rest is unread
			assert.Equal(t, response431, string(got))
			_ = c.Close() // ends the write, if the server's close has not
			<-written
		})
	}
}

// TestOversizedHeaderAnswered431 checks that the header cap still answers
// as net/http does, now that the limiter refuses the bytes before net/http
// sees too many of them: the same bytes, and the connection closed.
func TestOversizedHeaderAnswered431(t *testing.T) {
	t.Run("refused at accept", func(t *testing.T) { testOversizedHeader(t, func(ln net.Listener) net.Listener { return ln }) })
	// Without a socket to peek at, the limit on reads refuses it.
	t.Run("refused on read", func(t *testing.T) {
		testOversizedHeader(t, func(ln net.Listener) net.Listener {
			return probetest.NewListener(ln, probetest.Faults{HideConnDescriptors: true})
		})
	})
}

func testOversizedHeader(t *testing.T, wrap func(net.Listener) net.Listener) {
	ln, err := Listen("127.0.0.1:0")
	require.NoError(t, err)
	addr := serveTest(t, wrap(ln), Options{}).addr
	for _, size := range []int{maxRequestBytes, 9 << 10, 64 << 10} {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		head := "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: "
		_, err = io.WriteString(c, head+strings.Repeat("a", size-len(head)))
		require.NoError(t, err)
		got, _ := io.ReadAll(c) // a reset may follow the answer: the rest is unread
		_ = c.Close()
		assert.Equal(t, response431, string(got), "size %d", size)
	}
	// A request of the cap's size is a request like any other, answered
	// in full: net/http's read after it must not refuse it.
	head := "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: "
	got := exchange(t, addr, head+strings.Repeat("a", maxRequestBytes-len(head)-4)+"\r\n\r\n")
	assert.True(t, strings.HasPrefix(got, "HTTP/1.1 200 OK\r\n"), "%.40q", got)

	// Header fields: Host and n-1 more. Past maxHeaderFields (Go 1.27's
	// 500), or past the bytes, 431.
	withFields := func(n int) string {
		return "GET /healthz HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("a: 1\r\n", n-1) + "\r\n"
	}
	for _, fields := range []int{65, 500, 501, 1000} {
		got = exchange(t, addr, withFields(fields))
		if fields > maxHeaderFields || len(withFields(fields)) > maxRequestBytes {
			assert.Equal(t, response431, got, "%d fields", fields)
			continue
		}
		assert.True(t, strings.HasPrefix(got, "HTTP/1.1 200 OK\r\n"), "%d fields: %.40q", fields, got)
	}
	// What follows the header, a body or pipelined requests, is not the
	// header's: those lines do not count.
	for _, tc := range []struct{ raw, status string }{
		{"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + strings.Repeat("\n", 100), "200"},
		{strings.Repeat("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 30), "200"},
		{withFields(62) + "\n", "200"},
	} {
		got := exchange(t, addr, tc.raw)
		assert.True(t, strings.HasPrefix(got, "HTTP/1.1 "+tc.status+" "), "%.30q: %.40q", tc.raw, got)
	}
}

// atOnce bounds a close the server makes at once: half the shortest hold
// net/http would have instead (the 500 ms it lingers after refusing a
// request or leaving its body unread; waiting for a body, its 2 s read
// timeout), and far above a close's scheduling delay, even under -race.
const atOnce = 250 * time.Millisecond

// TestUndrainedBodiesAreClosedAtOnce checks that, where there is no room
// to hold it (hold.go), a request with a body is answered and its
// connection closed without waiting for the body: left to net/http, each
// would hold its slot, unevictable, for the read timeout.
func TestUndrainedBodiesAreClosedAtOnce(t *testing.T) {
	s := serveTest(t, nil, Options{Limit: 4, room: -1})
	addr := s.addr
	for i := 0; i < 8; i++ {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		_, err = io.WriteString(c, "POST /readyz HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
		require.NoError(t, err)
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err, "client %d", i)
		_ = resp.Body.Close()
		assert.Equal(t, 200, resp.StatusCode, "client %d", i)
		assert.True(t, probetest.ClosedWithin(c, atOnce), "client %d: not closed within %v of its answer", i, atOnce)
		_ = c.Close()
	}
	probetest.Eventually(t, func() bool { return s.counters.Held.Load() == 0 }, "every slot released")
	assert.Zero(t, s.counters.Evicted.Load(), "closed by the server after the answer, not evicted")
}

// TestLingerersAreClosedAtOnce sends, one at a time, each request that
// net/http would hold after reading it (hostile.Client.Lingers), where
// there is no room to hold it (hold.go): each is answered and closed at
// once, or reset by its client, and its slot freed without an eviction.
func TestLingerersAreClosedAtOnce(t *testing.T) {
	for _, hc := range lingerers(t) {
		t.Run(hc.Name, func(t *testing.T) {
			s := serveTest(t, nil, Options{Limit: 1, room: -1})
			c, err := net.Dial("tcp", s.addr)
			require.NoError(t, err)
			defer c.Close()
			_, _ = io.WriteString(c, hc.Request) // the server may close before all is written
			sent := time.Now()
			if hc.Then == hostile.Reset {
				require.NoError(t, c.(*net.TCPConn).SetLinger(0))
				_ = c.Close()
			} else {
				assert.True(t, probetest.ClosedWithin(c, atOnce), "not closed within %v of the request", atOnce)
			}
			for s.counters.Held.Load() != 0 && time.Since(sent) < atOnce {
				time.Sleep(time.Millisecond) // the slot is freed by its goroutine's end, which nothing marks
			}
			assert.Zero(t, s.counters.Held.Load(), "the slot not freed within %v of the request", atOnce)
			assert.Zero(t, s.counters.Evicted.Load(), "closed, not evicted")
		})
	}
}

// lingerers returns the hostile clients that net/http would hold after
// reading their request, failing the test if there are fewer than the
// three it must cover.
func lingerers(t *testing.T) []hostile.Client {
	var hcs []hostile.Client
	for _, hc := range hostile.Clients() {
		if hc.Lingers {
			hcs = append(hcs, hc)
		}
	}
	require.GreaterOrEqual(t, len(hcs), 3, "OPTIONS *, a body never sent, a 431")
	return hcs
}

// TestNothingLingers floods a bound of a single connection, which is never
// evicted while it is the newest, with requests that net/http would hold
// after reading them, reading or waiting for a body, or sleeping 500 ms
// before it closes. Each held slot would queue a probe that needs the slot
// behind every client, 16 deep; answered and closed at once, none does.
// With a waiting room, the kubelet's probes are answered at accept,
// whatever the slot holds, so slot probes are what the flood would delay.
func TestNothingLingers(t *testing.T) {
	floodTest(t)
	for _, hc := range lingerers(t) {
		for _, room := range rooms {
			t.Run(room.name+"/"+hc.Name, func(t *testing.T) { floodAndProbe(t, hc, 1, room.size, 16, 4, 4) })
		}
	}
}

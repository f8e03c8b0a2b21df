package listener

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/meshnode/health/internal/probetest"
)

// TestMain checks that no test leaves a goroutine behind: Serve promises
// to end everything it starts.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// okResponse is the tests' one answer, as a caller builds it.
var okResponse = &Response{
	Status: http.StatusOK,
	Header: []byte("Content-Length: 3\r\nContent-Type: text/plain; charset=utf-8\r\n"),
	Body:   []byte("ok\n"),
}

// served is a Serve call of a test's, on a fresh 127.0.0.1:0 listener.
type served struct {
	addr     string
	counters *Counters
	logs     *probetest.LogBuffer
	answered atomic.Int64 // AnswerFunc calls
	stop     func() error // cancels Serve and returns its result
}

// serveTest runs Serve, answering every request with okResponse (through
// Handler outside Linux), with a bound of limit (0 for DefaultLimit), until
// stop or the test's end.
func serveTest(t *testing.T, limit int) *served {
	t.Helper()
	s := &served{counters: &Counters{}, logs: &probetest.LogBuffer{}}
	opts := Options{
		Answer: func(string, string, string) *Response { s.answered.Add(1); return okResponse },
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			s.answered.Add(1)
			_, _ = w.Write(okResponse.Body)
		}),
		Counters: s.counters,
		Log:      logTo(s.logs),
		limit:    limit,
	}
	ln, err := Listen("127.0.0.1:0")
	require.NoError(t, err)
	s.addr = ln.Addr().String()
	s.stop = probetest.Start(t, func(ctx context.Context) error { return Serve(ctx, ln, opts) })
	probetest.Eventually(t, func() bool { return strings.Contains(s.logs.String(), "serving probes") }, "serving")
	return s
}

// logTo is a LogFunc writing to logs.
func logTo(logs *probetest.LogBuffer) LogFunc {
	logger := slog.New(slog.NewTextHandler(logs, nil))
	return func(level slog.Level, msg string, args ...any) {
		logger.Log(context.Background(), level, msg, args...)
	}
}

// dialSending connects to addr and sends raw, leaving the connection open.
func dialSending(t *testing.T, addr, raw string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	if raw != "" {
		_, err = c.Write([]byte(raw))
		require.NoError(t, err)
	}
	return c
}

const probe = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: kube-probe/1.31\r\n\r\n"

// TestLimitFor: three quarters of the soft descriptor limit, at most
// maxHeld, shared by the Serve calls counting in the same Counters.
func TestLimitFor(t *testing.T) {
	for _, tc := range []struct {
		soft  uint64
		taken int64
		want  int
	}{
		{0, 0, maxHeld}, // unknown
		{0, maxHeld, maxHeld},
		{128, 0, 96},
		{1024, 0, 768},
		{1024, 768, 1}, // a second Serve call gets what the first left, at least 1
		{1024, 700, 68},
		{5461, 0, 4095},
		{5462, 0, maxHeld},
		{1 << 20, maxHeld, maxHeld},
		{1, 0, 1},
	} {
		assert.Equal(t, tc.want, limitFor(tc.soft, tc.taken), "soft limit %d, %d taken", tc.soft, tc.taken)
	}
}

func TestLogGate(t *testing.T) {
	var g logGate
	start := time.Now()
	assert.True(t, g.due(start), "the first line")
	assert.False(t, g.due(start.Add(time.Minute-time.Nanosecond)), "within the minute")
	assert.True(t, g.due(start.Add(time.Minute)), "a minute on")
}

// TestServeLogsStartAndStop: one line as Serve starts, naming the address
// and the bound, one as it stops, and none per connection.
func TestServeLogsStartAndStop(t *testing.T) {
	s := serveTest(t, 16)
	for range 3 {
		assert.Contains(t, probetest.Exchange(t, s.addr, probe, 5*time.Second), "\r\n\r\nok\n")
	}
	assert.Equal(t, int64(16), s.counters.Limit.Load(), "while serving")
	require.NoError(t, s.stop())
	assert.Zero(t, s.counters.Limit.Load(), "once stopped")
	assert.Equal(t, []string{
		`level=INFO msg="health: serving probes" addr=` + s.addr + ` limit=16`,
		`level=INFO msg="health: stopped serving probes" addr=` + s.addr,
	}, logLines(s.logs))
	assert.Equal(t, uint64(3), s.counters.Accepted.Load())
	assert.Zero(t, s.counters.Held.Load())
}

// logLines returns the log's lines, time stripped.
func logLines(logs *probetest.LogBuffer) []string {
	var lines []string
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if _, rest, ok := strings.Cut(line, " "); ok {
			lines = append(lines, rest)
		}
	}
	return lines
}

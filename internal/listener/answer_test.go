package listener

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAnswerWriter(t *testing.T) {
	now := time.Date(2026, 12, 6, 7, 8, 9, 0, time.FixedZone("CET", 3600))
	const header = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Type: text/plain; charset=utf-8\r\nDate: Sun, 06 Dec 2026 06:08:09 GMT\r\n"
	for _, tc := range []struct {
		name, raw, want string
	}{
		{"HTTP/1.1", "GET /x HTTP/1.1\r\nHost: x\r\n\r\n", header + "Connection: close\r\n\r\nok\n"},
		{"HEAD keeps the length", "HEAD /x HTTP/1.1\r\nHost: x\r\n\r\n", header + "Connection: close\r\n\r\n"},
		{"HTTP/1.0 needs no close said", "GET /x HTTP/1.0\r\n\r\n", strings.Replace(header, "HTTP/1.1", "HTTP/1.0", 1) + "\r\nok\n"},
		{"HTTP/1.0 that may still send", "GET /x HTTP/1.0\r\nContent-Length: 5\r\n\r\n", strings.Replace(header, "HTTP/1.1", "HTTP/1.0", 1) + "Connection: close\r\n\r\nok\n"},
	} {
		req, ok := parseRequest([]byte(tc.raw))
		require.True(t, ok, tc.name)
		assert.Equal(t, tc.want, string((&encoder{}).encode(&req, okResponse, now)), tc.name)
	}
}

// TestAnswerWriterDate: the Date is formatted once a second, and the next
// second's is new.
func TestAnswerWriterDate(t *testing.T) {
	w := &encoder{}
	now := time.Date(2026, 12, 6, 7, 8, 9, 0, time.UTC)
	assert.Equal(t, "Sun, 06 Dec 2026 07:08:09 GMT", string(w.dateOf(now)))
	assert.Zero(t, testing.AllocsPerRun(100, func() { w.dateOf(now.Add(999 * time.Millisecond)) }))
	assert.Equal(t, "Sun, 06 Dec 2026 07:08:10 GMT", string(w.dateOf(now.Add(time.Second))))
}

// TestAnswerAllocatesNothing: a probe's answer is written into the
// writer's own buffer.
func TestAnswerAllocatesNothing(t *testing.T) {
	w := &encoder{}
	req, _ := parseRequest([]byte("GET /x HTTP/1.1\r\nHost: x\r\n\r\n"))
	now := time.Now()
	assert.Zero(t, testing.AllocsPerRun(100, func() { w.encode(&req, okResponse, now) }))
}

// TestConstantAnswers: the listener's own answers are well-formed HTTP,
// their length declared, saying Connection: close.
func TestConstantAnswers(t *testing.T) {
	for status, raw := range map[int]string{400: answer400, 431: answer431} {
		resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(raw)), nil)
		require.NoError(t, err, "%d", status)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		assert.Equal(t, status, resp.StatusCode)
		assert.Equal(t, http.StatusText(status), resp.Status[4:])
		assert.Equal(t, int64(len(body)), resp.ContentLength, "%d", status)
		assert.Equal(t, resp.Status+"\n", string(body))
		assert.True(t, resp.Close, "%d: Connection: close", status)
	}
}

// BenchmarkProbeAnswer is what a kubelet's probe costs the loop besides
// its system calls: the header parsed and the answer written.
func BenchmarkProbeAnswer(b *testing.B) {
	raw := []byte("GET /readyz HTTP/1.1\r\nHost: 127.0.0.1:9101\r\nUser-Agent: kube-probe/1.31\r\nAccept: */*\r\nConnection: close\r\n\r\n")
	var w encoder
	b.ReportAllocs()
	for b.Loop() {
		req, _ := parseRequest(raw[:headerEnd(raw, 0)])
		w.encode(&req, okResponse, time.Now())
	}
}

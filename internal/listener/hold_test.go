package listener

import (
	"bufio"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The verdicts on a body's first bytes, as net/http's reader gives them.
const (
	bodyEnded    = "ended"
	bodyNeedMore = "needs more"
	bodyFailed   = "failed"
)

// netHTTPVerdict has net/http read body, the first bytes of a chunked
// request's body, as its server drains one (io.CopyN of the body, up to
// maxDrain), from a pipe left open: whether the body ended, failed, or
// net/http waits for more (still reading after a while, which only a
// wait can tell, so each call costs that while).
func netHTTPVerdict(t *testing.T, body string) string {
	t.Helper()
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() {
		_, _ = io.WriteString(pw, "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"+body)
	}()
	done := make(chan error, 1)
	go func() {
		req, err := http.ReadRequest(bufio.NewReaderSize(pr, 4096))
		if err == nil {
			_, err = io.CopyN(io.Discard, req.Body, maxDrain)
		}
		done <- err
	}()
	select {
	case err := <-done:
		if errors.Is(err, io.EOF) {
			return bodyEnded
		}
		return bodyFailed
	case <-time.After(50 * time.Millisecond):
		_ = pw.CloseWithError(errors.New("test over"))
		<-done
		return bodyNeedMore
	}
}

// ourVerdict feeds body to a drain in random pieces.
func ourVerdict(body string, rng *rand.Rand) string {
	d := drain{chunked: true}
	kind := holdDrain
	for rest := body; len(rest) > 0 && kind == holdDrain; {
		n := 1 + rng.IntN(len(rest))
		kind, rest = d.consume([]byte(rest[:n])), rest[n:]
	}
	switch {
	case kind == holdNone && d.state == chunkEnded:
		return bodyEnded
	case kind == holdDrain:
		return bodyNeedMore
	}
	return bodyFailed
}

// TestDrainReadsChunksAsNetHTTP: for each chunked body's first bytes, the
// room's drain says what net/http's reader says, however the bytes are
// split: the body ended, failed, or needs more. Its caps are net/http's.
func TestDrainReadsChunksAsNetHTTP(t *testing.T) {
	for _, body := range []string{
		"0\r\n\r\n", "5\r\nhello\r\n0\r\n\r\n", "3;a=b\r\nabc\r\n0 \r\nX-T: 1\r\n\r\n", "A\r\n0123456789\r\n0\r\n\r\n",
		"0\r\n", "0\r\n\r", "5\r\nab", "5\r\nhello", "5\r\nhello\r", "5", "5\r", "", "0\r\nX: y\r\n",
		"zz\r\n", "zz", "x", " 5\r\nhello\r\n0\r\n\r\n", "5 ;x\r\nhello\r\n0\r\n\r\n", "5; x \r\nhello\r\n0\r\n\r\n",
		"5\t\r\nhello\r\n0\r\n\r\n", "5\nhello\r\n0\r\n\r\n", "5\r\nhello\n0\r\n\r\n", "5\r\nhelloXY", "5\r\nhelloX",
		"5\r\nhello\rX", "5\r\r\nhello\r\n0\r\n\r\n", "0\r\n\n", "0\r\nX: y\n\n", "0\r\nX: y\n\r\n",
		"ffffffffffffffff\r\nab", "ffffffffffff0000\r\nab", "8000000000000000\r\nab", "7fffffffffffffff\r\nab", "10000000000000000\r\n", "00000000000000005\r\nhello\r\n0\r\n\r\n", "0x5\r\n",
		";\r\n", "\r\n", "0\r\n" + strings.Repeat("X: y\r\n", 700) + "\r\n", "0\r\n" + strings.Repeat("X: y\r\n", 600),
		strings.Repeat("1;"+strings.Repeat("e", 4000)+"\r\nX\r\n", 6) + "0\r\n\r\n",
		strings.Repeat("1;"+strings.Repeat("e", 4000)+"\r\nX\r\n", 3) + "0\r\n\r\n",
		strings.Repeat("1\r\nX\r\n", 3000) + "0\r\n\r\n", "1;" + strings.Repeat("e", 4092) + "\r\nX\r\n0\r\n\r\n",
		"1;" + strings.Repeat("e", 4093) + "\r\nX\r\n0\r\n\r\n", "1;" + strings.Repeat("e", 5000),
	} {
		want := netHTTPVerdict(t, body)
		rng := rand.New(rand.NewPCG(uint64(len(body)), 1))
		for range 8 {
			require.Equal(t, want, ourVerdict(body, rng), "%.80q", body)
		}
	}
}

// TestDrainGivesUpAsNetHTTP: what follows each outcome of a drain, on this
// Go's net/http: a body read to its end closes at once; a body that fails,
// or reaches drainGivesUpAt, lingers where net/http does (failedDrain);
// with Expect: 100-continue, never.
func TestDrainGivesUpAsNetHTTP(t *testing.T) {
	whole := strings.Repeat("a", maxDrain)
	for _, tc := range []struct {
		name string
		req  request
		body string
		want holdKind
	}{
		{"a declared body, whole", request{length: 10}, "0123456789", holdNone},
		{"a declared body of maxDrain, whole", request{length: maxDrain}, whole, map[bool]holdKind{true: holdLinger, false: holdNone}[drainGivesUpAt == maxDrain]},
		{"a declared body past maxDrain", request{length: maxDrain + 1}, "", holdLinger},
		{"the same with Expect", request{length: maxDrain + 1, expect: true}, "", map[bool]holdKind{true: holdLinger, false: holdNone}[expectLingers]},
		{"a declared body, in part", request{length: 10}, "01234", holdDrain},
		{"a chunked body of maxDrain, then its end", request{chunked: true}, "40000\r\n" + whole + "\r\n0\r\n\r\n", map[bool]holdKind{true: holdLinger, false: holdNone}[drainGivesUpAt == maxDrain]},
		{"a chunked body past maxDrain", request{chunked: true}, "40001\r\n" + whole + "a", holdLinger},
		{"a malformed chunk", request{chunked: true}, "zz\r\n", failedDrain},
		{"a malformed chunk, with Expect", request{chunked: true, expect: true}, "zz\r\n", map[bool]holdKind{true: failedDrain, false: holdNone}[expectLingers]},
		{"a declared body, Connection: close", request{length: 10, closes: true}, "", holdNone},
	} {
		kind, _ := holdFor(&tc.req, []byte(tc.body))
		assert.Equal(t, tc.want, kind, tc.name)
	}
}

package listener

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshnode/health/internal/probetest"
)

// TestParseRequest checks what the parser takes of each plain probe, that
// it takes every other request the short path answers, and leaves to
// net/http every request it must.
func TestParseRequest(t *testing.T) {
	for _, raw := range probetest.PlainProbes() {
		p, ok := parseRequest([]byte(raw))
		require.True(t, ok, "%q", raw)
		method, target, _ := strings.Cut(raw, " ")
		target, version, _ := strings.Cut(target, " ")
		path, query, _ := strings.Cut(target, "?")
		assert.Equal(t, method, p.method, "%q", raw)
		assert.Equal(t, path, string(p.path), "%q", raw)
		assert.Equal(t, query, string(p.rawQuery), "%q", raw)
		assert.Equal(t, strings.HasPrefix(version, "HTTP/1.0"), p.http10, "%q", raw)
	}
	for _, tc := range probetest.OtherRequests {
		_, ok := parseRequest([]byte(tc.Raw))
		assert.True(t, ok, "%s: %q", tc.Name, tc.Raw)
	}
	for _, tc := range probetest.NetHTTPRequests {
		_, ok := parseRequest([]byte(tc.Raw))
		assert.False(t, ok, "%s: %q", tc.Name, tc.Raw)
	}
}

// TestHeaderScanner: the scanner finds the blank line that ends a header
// and counts its lines, however the bytes are split across scans, as a
// byte-by-byte reading of the same bytes does.
func TestHeaderScanner(t *testing.T) {
	reference := func(p []byte) (lines int, done bool) {
		lineEmpty := false
		for _, b := range p {
			switch b {
			case '\n':
				lines++
				if lineEmpty {
					return lines, true
				}
				lineEmpty = true
			case '\r':
			default:
				lineEmpty = false
			}
		}
		return lines, false
	}
	for _, raw := range []string{
		"", "\n", "\r\n", "\n\n", "\r\n\r\n", "GET / HTTP/1.1\r\n", "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET / HTTP/1.1\nHost: x\n\n", "a\r\r\n\r\r\n", "a\r\n \r\n\r\n", "a\r\nb\rc\r\n\r\nbody\n\n",
		"\r\r\r", "x\n\rx\n\r\n", strings.Repeat("a", 4000) + "\r\n\r\n", strings.Repeat("a:\r\n", 70) + "\r\n",
	} {
		wantLines, wantDone := reference([]byte(raw))
		for split := 0; split <= len(raw); split += max(1, len(raw)/7) {
			var s headerScanner
			s.scan([]byte(raw[:split]))
			s.scan([]byte(raw[split:]))
			assert.Equal(t, wantDone, s.done, "%q split at %d", raw, split)
			assert.Equal(t, wantLines, s.lines, "%q split at %d", raw, split)
		}
	}
}

// TestPlainLinesSkipTheParse: every whole-line start of every plain probe
// is plain, so the room's question whether net/http has refused it costs
// no parse and no allocation; a line parseRequest would not take is not.
func TestPlainLinesSkipTheParse(t *testing.T) {
	r := newReader(nil)
	for _, raw := range probetest.PlainProbes() {
		for end := strings.IndexByte(raw, '\n'); end >= 0 && end < len(raw)-2; {
			n := copy(r.buf, raw[:end+1])
			assert.True(t, plainLines(r.buf[:n]), "%q", raw[:end+1])
			parses := uint8(1)
			assert.Zero(t, testing.AllocsPerRun(10, func() { r.refusedByNetHTTP(n, false, &parses) }), "%q", raw[:end+1])
			assert.Equal(t, uint8(1), parses, "%q: parsed", raw[:end+1])
			next := strings.IndexByte(raw[end+1:], '\n')
			if next < 0 {
				break
			}
			end += 1 + next
		}
	}
	for _, raw := range []string{
		"BREW / HTTP/1.1\r\n", "GET / HTTP/1.1\n", "GET / HTTP/1.1\r\nHost : x\r\n",
		"GET / HTTP/1.1\r\n x: y\r\n", "GET / HTTP/1.1\r\nX: \x80\r\n", "GET / HTTP/1.1\r\nX\r\n",
	} {
		assert.False(t, plainLines([]byte(raw)), "%q", raw)
	}
}

// TestHeaderEnd: the header ends at the first blank line after the first,
// as net/http reads a blank line: "\r\n" or "\n", not "\r\r\n".
func TestHeaderEnd(t *testing.T) {
	for _, tc := range []struct {
		b    string
		want int
	}{
		{"", 0},
		{"GET / HTTP/1.1\r\n", 16},
		{"GET / HTTP/1.1\r\n\r\nbody", 16},
		{"GET / HTTP/1.1\nA: b\n\n", 20},
		{"\r\nGET / HTTP/1.1\r\n\r\n", 18},
		{"GET / HTTP/1.1\r\n\r\r\n", 19},
	} {
		assert.Equal(t, tc.want, headerEnd([]byte(tc.b)), "%q", tc.b)
	}
}

package listener

import (
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshnode/health/internal/hostile"
	"github.com/meshnode/health/internal/probetest"
)

// peekOffsetWorks reports whether this kernel lets a TCP socket peek from
// an offset (SO_PEEK_OFF), on which the room reads past an urgent byte
// and peeks only at what is new.
func peekOffsetWorks(t *testing.T) bool {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	require.NoError(t, err)
	defer syscall.Close(fd)
	return syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, soPeekOff, 0) == nil
}

// withoutPeekOffset makes the room's kernel one without SO_PEEK_OFF for
// TCP, until t's end, and reports true: the room cannot peek past an
// urgent byte, and leaves such a header to net/http.
func withoutPeekOffset(t *testing.T) bool {
	own := setPeekOffset
	setPeekOffset = func(uintptr, int) error { return syscall.EOPNOTSUPP }
	t.Cleanup(func() { setPeekOffset = own })
	return true
}

// TestPeekPastUrgent: wherever an urgent byte falls in a header that
// arrives in two parts, each peek sees exactly the bytes net/http's reads
// would, the urgent byte left out, and nothing twice; and the read that
// consumes them after the answer gets them all.
func TestPeekPastUrgent(t *testing.T) {
	if !peekOffsetWorks(t) {
		t.Skip("this kernel cannot peek from an offset: urgent headers go to net/http")
	}
	const first, rest = "GET /readyz HTTP/1.1\r\nHo", "st: x\r\n\r\n"
	for _, at := range []int{0, 5, len(first)} { // the urgent byte sent before first[at]
		server, client := probetest.TCPPair(t)
		send := func(s string, urgent bool) {
			_, err := io.WriteString(client, s)
			require.NoError(t, err)
			if urgent {
				require.NoError(t, hostile.SendUrgent(client))
			}
		}
		calls, buf := newConnCalls(), make([]byte, maxRequestBytes)
		peekAll := func(want string, wantPeeked peeked) {
			var p peeked
			var n int
			probetest.Eventually(t, func() bool {
				p, n = calls.peek(server, buf, true, false)
				return n >= len(want)
			}, "the bytes sent")
			assert.Equal(t, want, string(buf[:n]), "urgent byte before byte %d", at)
			assert.Equal(t, wantPeeked, p)
		}
		send(first[:at], true)
		send(first[at:], false)
		peekAll(first, peekedIncomplete)
		send(rest, false)
		peekAll(first+rest, peekedComplete)
		require.True(t, calls.read(buf[:len(first+rest)]), "the read of what the peek saw")
		assert.Equal(t, first+rest, string(buf[:len(first+rest)]))
	}
}

// TestUrgentHeaderTimesOutWithAFIN: a header never completed whose last
// unread byte is urgent is closed at its header timeout, not before, with
// a FIN, as net/http's is: the urgent byte is read too, not left queued to
// turn the close into a reset.
func TestUrgentHeaderTimesOutWithAFIN(t *testing.T) {
	s := serveTest(t, nil, Options{})
	for _, partial := range []string{"", "GET /readyz HTTP/1.1\r\nHost: x\r\n"} {
		start := time.Now()
		c, err := net.Dial("tcp", s.addr)
		require.NoError(t, err)
		defer c.Close()
		_, err = io.WriteString(c, partial)
		require.NoError(t, err)
		require.NoError(t, hostile.SendUrgent(c))
		require.NoError(t, c.SetReadDeadline(time.Now().Add(2*headerTimeout)))
		got, err := io.ReadAll(c)
		assert.NoError(t, err, "%q: a FIN, not a reset", partial)
		assert.Empty(t, got)
		assert.GreaterOrEqual(t, time.Since(start), headerTimeout)
		assert.Less(t, time.Since(start), headerTimeout+holdMargin)
	}
}

// TestUrgentFloodWaitsInTheRoom: on a kernel without SO_PEEK_OFF for TCP,
// partial headers each carrying an urgent byte, many more than there are
// slots, wait in the room, none evicted, while a probe is answered.
func TestUrgentFloodWaitsInTheRoom(t *testing.T) {
	withoutPeekOffset(t)
	s := serveTest(t, nil, Options{Limit: 2})
	const clients = 64
	for range clients {
		c, err := net.Dial("tcp", s.addr)
		require.NoError(t, err)
		defer c.Close()
		_, err = io.WriteString(c, "GET /readyz HTTP/1.1\r\nHo")
		require.NoError(t, err)
		require.NoError(t, hostile.SendUrgent(c))
	}
	probetest.Eventually(t, func() bool { return s.counters.Accepted.Load() == clients }, "every client accepted")
	assert.True(t, strings.HasPrefix(exchange(t, s.addr, probeRequest), "HTTP/1.1 200 OK\r\n"))
	assert.Zero(t, s.counters.Evicted.Load(), "none evicted")
}

// TestUrgentThenShutAsNetHTTP: a client that sends an urgent byte, after
// part of a header or alone, and shuts its side gets from Serve what it
// gets from net/http, ending in a FIN: the urgent byte is read before the
// close, not left to turn it into a reset.
func TestUrgentThenShutAsNetHTTP(t *testing.T) {
	s := serveTest(t, nil, Options{})
	refAddr := serveReference(t, s.probes, nil)
	for _, before := range []string{"GET / HTTP/1.1\r\nHo", ""} {
		var answers [2]string
		for i, addr := range []string{refAddr, s.addr} {
			c, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			defer c.Close()
			_, err = io.WriteString(c, before)
			require.NoError(t, err)
			require.NoError(t, hostile.SendUrgent(c))
			require.NoError(t, c.(*net.TCPConn).CloseWrite())
			require.NoError(t, c.SetReadDeadline(time.Now().Add(2*headerTimeout)))
			got, err := io.ReadAll(c)
			assert.NoError(t, err, "%q to %s: a FIN", before, addr)
			answers[i] = string(got)
		}
		assert.Equal(t, answers[0], answers[1], "%q", before)
	}
}

// TestRoomSeesALateUrgentByte: an urgent byte that arrives while its
// header waits in the room is seen, as the epoll set reports it, and the
// header is answered at once when its end follows.
func TestRoomSeesALateUrgentByte(t *testing.T) {
	if !peekOffsetWorks(t) {
		t.Skip("this kernel cannot peek from an offset: an urgent header waits for its deadline")
	}
	r := newRoomRig(t, nil, 16)
	start := time.Now()
	c := r.dialWaiting(1)
	require.NoError(t, hostile.SendUrgent(c))
	_, err := io.WriteString(c, "\n")
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(2*headerTimeout)))
	got, err := io.ReadAll(c)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(got), "HTTP/1.1 503 Service Unavailable\r\n"), "%q", got)
	assert.Less(t, time.Since(start), headerTimeout/2, "answered late")
}

// TestRoomPeeksOnlyWhatIsNew: once a rewound peek has set a connection's
// peek offset, each arrival is peeked at alone, and there is something to
// decide exactly when a line ends, the caps are reached, or the client
// goes; a rewound peek then sees the whole header again. Without the
// option, no peek offset is set, and every peek looks at all of it.
func TestRoomPeeksOnlyWhatIsNew(t *testing.T) {
	if !peekOffsetWorks(t) {
		t.Skip("this kernel cannot peek from an offset: every arrival is peeked at whole")
	}
	const start = "GET / HTTP/1.1\r\nHo"
	steps := []struct {
		send      string
		unchanged bool
		seen      int
	}{
		{"", true, len(start)},
		{"s", true, len(start) + 1},
		{"t: x\r", true, len(start) + 6},
		{"\n", false, len(start) + 7},
		{strings.Repeat("a", maxRequestBytes-len(start)-8), true, maxRequestBytes - 1},
		{"a", false, maxRequestBytes},
	}
	server, client := probetest.TCPPair(t)
	r := newReader(nil)
	rewound := func(want string) (seen int, header headerScanner) {
		var n int
		var offset bool
		probetest.Eventually(t, func() bool {
			_, n, offset = r.repeek(server, false)
			return n >= len(want)
		}, "the bytes sent")
		require.Equal(t, want, string(r.buf[:n]))
		require.True(t, offset, "the peek offset set")
		header.scan(r.buf[:n])
		return n, header
	}
	_, err := io.WriteString(client, start)
	require.NoError(t, err)
	seen, header := rewound(start)
	sent := start
	for _, step := range steps {
		_, err := io.WriteString(client, step.send)
		require.NoError(t, err)
		sent += step.send
		var unchanged bool
		probetest.Eventually(t, func() bool {
			unchanged = r.unchanged(server, &seen, &header)
			return seen == step.seen || !unchanged
		}, "the bytes sent")
		assert.Equal(t, step.unchanged, unchanged, "after %q", step.send)
		assert.Equal(t, step.seen, seen, "after %q", step.send)
	}
	assert.Equal(t, 2, header.lines)
	rewound(sent)

	server, client = probetest.TCPPair(t)
	_, err = io.WriteString(client, start)
	require.NoError(t, err)
	seen, header = rewound(start)
	require.NoError(t, client.(*net.TCPConn).CloseWrite())
	probetest.Eventually(t, func() bool { return !r.unchanged(server, &seen, &header) }, "the client gone")

	withoutPeekOffset(t)
	refused, tries := setPeekOffset, 0
	setPeekOffset = func(fd uintptr, off int) error { tries++; return refused(fd, off) }
	r = newReader(nil)
	server, client = probetest.TCPPair(t)
	_, err = io.WriteString(client, start)
	require.NoError(t, err)
	for range 2 {
		probetest.Eventually(t, func() bool {
			_, n, offset := r.repeek(server, false)
			require.False(t, offset, "no peek offset without the option")
			return n == len(start)
		}, "the bytes sent")
	}
	assert.Equal(t, 1, tries, "not tried again")
}

// TestTrickledHeaderAnswered: a header that arrives in the room a byte at
// a time is answered as soon as it is whole, and one with a line net/http
// refuses gets its 400 as soon as that line ends, with the peek offset or
// without it.
func TestTrickledHeaderAnswered(t *testing.T) {
	for _, kernel := range []struct {
		name       string
		peekOffset func(*testing.T) bool
	}{
		{"this kernel", peekOffsetWorks},
		{"a kernel without SO_PEEK_OFF for TCP", withoutPeekOffset},
	} {
		t.Run(kernel.name, func(t *testing.T) {
			if !kernel.peekOffset(t) {
				t.Skip("this kernel cannot be made so")
			}
			s := serveTest(t, nil, Options{})
			for _, tc := range []struct{ send, want string }{
				{"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP/1.1 200 OK\r\n"},
				{"GET /readyz HTTP/1.1\r\nBad Header\r\n", response400},
			} {
				start, accepted := time.Now(), s.counters.Accepted.Load()
				c, err := net.Dial("tcp", s.addr)
				require.NoError(t, err)
				defer c.Close()
				for i := range len(tc.send) {
					_, err := io.WriteString(c, tc.send[i:i+1])
					require.NoError(t, err)
					if i == 0 { // the rest arrives in the room
						probetest.Eventually(t, func() bool { return s.counters.Accepted.Load() > accepted }, "the accept")
					}
				}
				require.NoError(t, c.SetReadDeadline(time.Now().Add(2*headerTimeout)))
				got, err := io.ReadAll(c)
				require.NoError(t, err)
				assert.True(t, strings.HasPrefix(string(got), tc.want), "%q", got)
				assert.Less(t, time.Since(start), headerTimeout/2, "answered late: %q", tc.send)
			}
		})
	}
}

// TestRoomSeesDataAndFINTogether: bytes that end no line, arriving with
// the client's FIN in one segment, are one report of the epoll set, and
// the header is settled on it (net/http's 400 to a half-closed partial
// header) rather than left to its deadline.
func TestRoomSeesDataAndFINTogether(t *testing.T) {
	if !peekOffsetWorks(t) {
		t.Skip("this kernel cannot peek from an offset: every arrival is peeked at whole")
	}
	r := newRoomRig(t, nil, 16)
	start := time.Now()
	c := r.dial("GET /readyz HTTP/1.1\r\nHo")
	probetest.Eventually(t, func() bool {
		r.l.room.mu.Lock()
		defer r.l.room.mu.Unlock()
		w := r.l.room.waiting.front()
		return w != nil && w.seen > 0
	}, "the room peeking from an offset")
	rc, err := c.(*net.TCPConn).SyscallConn()
	require.NoError(t, err)
	require.NoError(t, rc.Control(func(fd uintptr) { // hold the bytes for the FIN's segment
		require.NoError(t, syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_CORK, 1))
	}))
	_, err = io.WriteString(c, "st: x")
	require.NoError(t, err)
	require.NoError(t, c.(*net.TCPConn).CloseWrite())
	require.NoError(t, c.SetReadDeadline(time.Now().Add(2*headerTimeout)))
	got, err := io.ReadAll(c)
	require.NoError(t, err)
	assert.Equal(t, response400, string(got))
	assert.Less(t, time.Since(start), headerTimeout/2, "settled late")
}

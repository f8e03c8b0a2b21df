// Package probetest holds what the tests of the package and of its
// listener share: clients that speak to a server over real loopback TCP,
// the requests a probe sends and those it never does, the plain net/http
// server Serve is compared with, and a log sink that tests can read while
// a server writes to it. Only tests import it, so that the library's own
// imports stay the standard library's.
package probetest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// LogBuffer is a slog destination that tests can read while a server
// writes to it.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Count returns how many lines of log contain substr.
func Count(log, substr string) int {
	n := 0
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, substr) {
			n++
		}
	}
	return n
}

// Eventually waits up to 10 s for cond, polling every millisecond, for
// conditions no event of the test marks (a timer's, another goroutine's).
func Eventually(t testing.TB, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10 s: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// KubeletProbe does what the kubelet's httpGet probe does: a fresh
// connection, one GET, and the whole answer read. It reads on to the
// server's close, so that a test's next step starts after the server has
// let go of this connection.
func KubeletProbe(addr, path string) (status int, body string, err error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0, "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	req := "GET " + path + " HTTP/1.1\r\nHost: " + addr + "\r\nUser-Agent: kube-probe/1.31\r\nAccept: */*\r\nConnection: close\r\n\r\n"
	if _, err := io.WriteString(c, req); err != nil {
		return 0, "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil {
		_, err = io.Copy(io.Discard, c)
	}
	return resp.StatusCode, string(b), err
}

// Exchange sends raw bytes on a fresh connection, then shuts its sending
// side, as a client that has sent all it will, and returns everything the
// server sends back before it closes the connection, a reset counting as
// a close. A server that holds a connection after its answer, for a
// client that may still be sending, lets it go at that shut. The client
// gives up after within; a server that keeps the connection open that long
// fails the test.
func Exchange(t testing.TB, addr, raw string, within time.Duration) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The server may close before all of it is written, and a read may
	// end in a reset: only a timeout means it kept the connection open.
	_, _ = io.WriteString(c, raw)
	_ = c.(*net.TCPConn).CloseWrite()
	_ = c.SetReadDeadline(time.Now().Add(within))
	got, err := io.ReadAll(c)
	if isTimeout(err) {
		t.Fatalf("the server did not close within %v", within)
	}
	return string(got)
}

// ClosedByServer reads c until the server's close shows, EOF or a reset
// (the server closed with request bytes unread), and reports false if it
// did not within 10 s: the server kept the connection open.
func ClosedByServer(c net.Conn) bool { return ClosedWithin(c, 10*time.Second) }

// ClosedWithin is ClosedByServer with a bound of within, for a close that
// is itself what a test times.
func ClosedWithin(c net.Conn, within time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(within))
	_, err := io.Copy(io.Discard, c)
	return !isTimeout(err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

var dateHeader = regexp.MustCompile("\r\nDate: [^\r\n]*\r\n")

// MaskDate replaces the value of an answer's Date header, the one part two
// answers to the same request may differ in, after checking that it is a
// date of now in net/http's format.
func MaskDate(t testing.TB, answer string) string {
	t.Helper()
	m := dateHeader.FindStringIndex(answer)
	if m == nil {
		return answer
	}
	value := answer[m[0]+len("\r\nDate: ") : m[1]-len("\r\n")]
	date, err := time.Parse(http.TimeFormat, value)
	if err != nil || time.Since(date).Abs() > time.Minute || date.UTC().Format(http.TimeFormat) != value {
		t.Fatalf("Date %q is not now in http.TimeFormat", value)
	}
	return answer[:m[0]] + "\r\nDate: (masked)\r\n" + answer[m[1]:]
}

// Start runs serve until stop cancels its ctx, and stop returns serve's
// result, or an error if serve has not returned within 30 s: a Serve that
// hangs on shutdown fails the test rather than hanging it. The test's
// cleanup stops it, once.
func Start(t testing.TB, serve func(context.Context) error) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx) }()
	var once sync.Once
	var result error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case result = <-done:
			case <-time.After(30 * time.Second):
				result = errors.New("serve did not return within 30 s")
			}
		})
		return result
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// Package hostile is the one list of the ways a local client can try to
// hold a connection of the health listener, or the goroutine serving it,
// without being a probe. The health package's tests flood Serve with each
// of them, and cmd/probeflood's attackers send them, so that what the
// tests prove and what the load tool measures are the same clients.
package hostile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"time"
)

// Then is what a client does once it has written its request.
type Then uint8

const (
	// AwaitClose reads whatever the server answers, until it closes.
	AwaitClose Then = iota
	// Trickle sends a header line every 1 to 3 s until the server
	// closes: slowloris.
	Trickle
	// HalfClose closes its sending side, then awaits the close.
	HalfClose
	// LeaveUnread leaves the answer unread for NoReadHold, past the
	// server's write timeout, then awaits the close.
	LeaveUnread
	// Reset resets the connection at once, before any answer.
	Reset
	// CloseAtOnce closes the connection at once: connect-and-close churn.
	CloseAtOnce
	// TrickleChunks sends a chunk of a chunked body, one byte of it,
	// every second until the server closes, and never the last chunk:
	// the chunks are valid, so a server reading the body keeps waiting
	// for the next rather than failing it.
	TrickleChunks
	// Urgent sends one TCP urgent (MSG_OOB) byte, which a peek stops
	// short of, then awaits the close.
	Urgent
	// TrickleBytes sends header lines a byte every ByteEvery until the
	// server closes: each byte is an arrival the server must look at.
	TrickleBytes
)

// ByteEvery is how often a TrickleBytes client sends a byte: a header of
// about 400 bytes by a 2 s header timeout, within any cap.
const ByteEvery = 5 * time.Millisecond

// NoReadHold is how long a LeaveUnread client leaves the answer unread:
// past the server's 2 s write timeout, so that whatever the server does
// with a client that does not read, it has done it by then.
const NoReadHold = 3 * time.Second

// What a TrickleChunks client sends, and how often: a chunk of one byte.
const (
	trickledChunk = "1\r\nx\r\n"
	chunkEvery    = time.Second
)

// trickledLine is what a TrickleBytes client sends, over and over.
const trickledLine = "X-Slow: 1\r\n"

// Client is one kind of hostile client.
type Client struct {
	Name    string // one lower-case word: cmd/probeflood's flag for it
	Help    string // what it does, for a flag's help
	Request string // what it writes as soon as it has connected; "" for nothing
	Then    Then
}

// Loops reports whether the client reconnects without waiting for the
// server at all, a loop of handshakes as fast as one core runs it.
func (c Client) Loops() bool { return c.Then == Reset || c.Then == CloseAtOnce }

// The requests below name 127.0.0.1 as their Host: every client targets
// loopback.
const (
	partialGet = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
	// bigHeader makes a header block of about 12 KiB: past any
	// MaxHeaderBytes of at most 8 KiB together with the 4 KiB net/http
	// reads beyond it.
	bigHeader = 12 << 10
	// pipelined is how many requests the pipeline client writes at once.
	pipelined = 4
)

// bigHeaderGet is a GET /healthz with a header past any cap.
var bigHeaderGet = partialGet + "X-Big: " + strings.Repeat("a", bigHeader) + "\r\n\r\n"

// tlsClientHello is a minimal, well-formed TLS 1.2 ClientHello record:
// one cipher suite, no extensions, and a random with no newline in it.
var tlsClientHello = "\x16\x03\x01\x00\x2d" + // handshake record, 45 bytes
	"\x01\x00\x00\x29" + // ClientHello, 41 bytes
	"\x03\x03" + strings.Repeat("\x5a", 32) + // TLS 1.2, random
	"\x00" + // no session ID
	"\x00\x02\xc0\x2f" + // one cipher suite: ECDHE-RSA-AES128-GCM-SHA256
	"\x01\x00" // no compression

// clients is the list, in the order the tools show it.
var clients = []Client{
	{Name: "slowloris", Help: "a partial request, then a header line every 1 to 3 s", Request: partialGet, Then: Trickle},
	{Name: "idle", Help: "connects and sends nothing"},
	{Name: "churn", Help: "connects and closes at once, in a loop", Then: CloseAtOnce},
	{Name: "options", Help: "OPTIONS * declaring Content-Length: 4096, the body never sent", Request: "OPTIONS * HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 4096\r\n\r\n"},
	{Name: "bigheader", Help: "a 12 KiB header, past any server's cap (431)", Request: bigHeaderGet},
	{Name: "hugebody", Help: "POST /healthz declaring Content-Length: 1099511627776 (1 TiB), the body never sent", Request: "POST /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1099511627776\r\n\r\n"},
	{Name: "smallbody", Help: "POST /readyz declaring Content-Length: 1000, the body never sent", Request: "POST /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n"},
	{Name: "expect", Help: "POST /healthz with Expect: 100-continue, the body never sent", Request: "POST /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\nExpect: 100-continue\r\n\r\n"},
	{Name: "expectother", Help: "GET /readyz with Expect: x (not 100-continue) declaring Content-Length: 1000, the body never sent", Request: "GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: x\r\nContent-Length: 1000\r\n\r\n"},
	{Name: "manyheaders", Help: "501 header lines in 2 KiB: past Go 1.27's 500-value cap", Request: partialGet + strings.Repeat("a:\r\n", 501) + "\r\n"},
	{Name: "trailers", Help: "a chunked POST announcing 501 trailer names", Request: "POST /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\nTrailer: " + strings.Repeat("a,", 500) + "a\r\n\r\n"},
	{Name: "chunked", Help: "a chunked POST whose body never ends", Request: "POST /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab"},
	{Name: "smallbodyreset", Help: "POST /readyz declaring Content-Length: 10, then a reset at once", Request: "POST /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10\r\n\r\n", Then: Reset},
	{Name: "hugebodyreset", Help: "POST /readyz declaring a 1 TiB body, then a reset at once", Request: "POST /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1099511627776\r\n\r\n", Then: Reset},
	{Name: "pipeline", Help: fmt.Sprintf("%d complete GET requests in one write, then silence", pipelined), Request: strings.Repeat(partialGet+"\r\n", pipelined)},
	{Name: "urgent", Help: "a partial request, one urgent (MSG_OOB) byte, then silence", Request: partialGet, Then: Urgent},
	{Name: "halfclose", Help: "a partial request, then a half-close (CloseWrite)", Request: partialGet, Then: HalfClose},
	{Name: "tls", Help: "a TLS ClientHello on the plain port, then silence", Request: tlsClientHello},
	{Name: "h2", Help: "the HTTP/2 client preface, then silence", Request: "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"},
	{Name: "noread", Help: "a complete GET, its answer left unread for 3 s (past the write timeout)", Request: partialGet + "\r\n", Then: LeaveUnread},
	// GET /healthz, a probe's own request line, with one thing a probe
	// never sends: a body awaited, trickled or declared huge, or a header
	// past the cap (bigheader's, already a GET /healthz).
	{Name: "getexpect", Help: "GET /healthz with Expect: 100-continue declaring Content-Length: 1000, the body never sent", Request: partialGet + "Content-Length: 1000\r\nExpect: 100-continue\r\n\r\n"},
	{Name: "gettrickle", Help: "GET /healthz with a chunked body trickled, a 1-byte chunk a second, never ended", Request: partialGet + "Transfer-Encoding: chunked\r\n\r\n", Then: TrickleChunks},
	{Name: "gethugebody", Help: "GET /healthz declaring Content-Length: 1099511627776 (1 TiB), the body never sent", Request: partialGet + "Content-Length: 1099511627776\r\n\r\n"},
}

// Clients returns every kind of hostile client, in a fixed order.
func Clients() []Client { return append([]Client(nil), clients...) }

// Find returns the client of that name.
func Find(name string) (Client, bool) {
	for _, c := range clients {
		if c.Name == name {
			return c, true
		}
	}
	return Client{}, false
}

// Run plays the client on c, a connection it has just made, until the
// server closes it or ctx is done; a client that Loops returns at once.
// The caller closes c, which for a Reset client resets it.
func (cl Client) Run(ctx context.Context, c net.Conn) {
	if cl.Request != "" {
		// The server may close before all of it is written.
		if _, err := c.Write([]byte(cl.Request)); err != nil {
			return
		}
	}
	switch cl.Then {
	case CloseAtOnce:
		return
	case Reset:
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		return
	case HalfClose:
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	case Urgent:
		if SendUrgent(c) != nil {
			return
		}
	case LeaveUnread:
		t := time.NewTimer(NoReadHold)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	case Trickle, TrickleChunks, TrickleBytes:
		for i := 0; ctx.Err() == nil; i++ {
			wait, next := chunkEvery, trickledChunk
			switch cl.Then {
			case Trickle:
				wait, next = time.Second+rand.N(2*time.Second), fmt.Sprintf("X-Slow-%d: 1\r\n", i)
			case TrickleBytes:
				wait, next = ByteEvery, trickledLine[i%len(trickledLine):][:1]
			}
			if ClosedByServer(ctx, c, time.Now().Add(wait)) {
				return
			}
			if _, err := io.WriteString(c, next); err != nil {
				return
			}
		}
		return
	}
	ClosedByServer(ctx, c, time.Now().Add(time.Hour))
}

// ClosedByServer reads c, discarding what the server answers, until the
// server closes it, until passes, or ctx is done, and reports whether the
// server closed it (a reset counts).
func ClosedByServer(ctx context.Context, c net.Conn, until time.Time) bool {
	if dl, ok := ctx.Deadline(); ok && dl.Before(until) {
		until = dl
	}
	_ = c.SetReadDeadline(until)
	stop := context.AfterFunc(ctx, func() { _ = c.SetReadDeadline(time.Now()) })
	defer stop()
	var buf [512]byte
	for {
		_, err := c.Read(buf[:])
		if err == nil {
			continue // an answer (a 4xx, say): read on to the close
		}
		var ne net.Error
		return !(errors.As(err, &ne) && ne.Timeout())
	}
}

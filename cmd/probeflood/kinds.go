package main

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// kind is one kind of attacking client. Every kind has a flag of its name,
// on this command (for the custom load) and on the attack child, giving how
// many clients of that kind run at once.
type kind int

const (
	kindSlowloris kind = iota
	kindIdle
	kindChurn
	kindOptions
	kindBigHeader
	kindHugeBody
	kindSmallBody
	kindExpect
	kindPipeline
	kindHalfClose
	kindTLS
	kindH2
	kindNoRead
	kindExpectOther
	kindManyHeaders
	numKinds
)

// counts is how many clients of each kind a load runs.
type counts [numKinds]int

// kinds names and describes every kind, in the order of the constants.
var kinds = [numKinds]struct{ name, help string }{
	kindSlowloris: {"slowloris", "a partial request, then a header line every 1 to 3 s"},
	kindIdle:      {"idle", "connects and sends nothing"},
	kindChurn:     {"churn", "connect-and-close loops (-1: one per core)"},
	kindOptions:   {"options", "OPTIONS * declaring Content-Length: 4096, no body sent"},
	kindBigHeader: {"bigheader", "a 12 KiB header, so net/http answers 431"},
	kindHugeBody:  {"hugebody", "POST /healthz declaring Content-Length: 1099511627776 (1 TiB), no body sent"},
	kindSmallBody: {"smallbody", "POST /readyz declaring Content-Length: 1000, no body sent"},
	kindExpect:    {"expect", "POST /healthz with Expect: 100-continue, the body never sent"},
	kindPipeline:  {"pipeline", "4 complete GET requests in one write, then silence"},
	kindHalfClose: {"halfclose", "a partial request, then a half-close (CloseWrite)"},
	kindTLS:       {"tls", "a TLS ClientHello on the plain port, then silence"},
	kindH2:        {"h2", "the HTTP/2 client preface, then silence"},
	kindNoRead:    {"noread", "a complete GET, its answer left unread for 3 s (past the write timeout), then waits for the close"},
	// net/http answers these itself, then waits for the body or lingers.
	kindExpectOther: {"expectother", "GET /readyz with Expect: x (not 100-continue) declaring Content-Length: 1000, no body sent"},
	kindManyHeaders: {"manyheaders", "501 header lines in 2 KiB: past Go 1.27's 500-value cap"},
}

func (k kind) String() string { return kinds[k].name }

// describe lists the non-zero counts, such as "1,000 slowloris + 1,000 idle".
func (c counts) describe() string {
	var parts []string
	for k, n := range c {
		switch {
		case n == 0:
		case n < 0 && kind(k) == kindChurn:
			parts = append(parts, "churn (one loop per core)")
		default:
			parts = append(parts, fmt.Sprintf("%s %s", thousands(n), kind(k)))
		}
	}
	if len(parts) == 0 {
		return "no attackers"
	}
	return strings.Join(parts, " + ")
}

// total is the number of clients, not counting a churn of one loop per
// core.
func (c counts) total() int {
	t := 0
	for _, n := range c {
		t += max(n, 0)
	}
	return t
}

// thousands prints n with a comma between thousands, as the table does.
func thousands(n int) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + thousands(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

const (
	requestLine = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
	// bigHeaderValue makes a header block of about 12 KiB: past any
	// MaxHeaderBytes of at most 8 KiB together with the 4 KiB net/http
	// reads beyond it.
	bigHeaderValue = 12 << 10
	// hugeBodyLength is 1 TiB: far more than net/http drains.
	hugeBodyLength = 1 << 40
	// pipelined is how many requests the pipeline kind writes at once.
	pipelined = 4
	// h2Preface is the HTTP/2 client connection preface (RFC 9113, 3.4).
	h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
)

// request is what a client of kind k writes right after connecting; nil for
// the kinds that write nothing (idle, churn) or write as they go
// (slowloris), and for tls, whose bytes come from clientHello.
func request(k kind) []byte {
	switch k {
	case kindOptions:
		return []byte("OPTIONS * HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 4096\r\n\r\n")
	case kindBigHeader:
		return []byte(requestLine + "X-Big: " + strings.Repeat("a", bigHeaderValue) + "\r\n\r\n")
	case kindHugeBody:
		return []byte(fmt.Sprintf("POST /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n", int64(hugeBodyLength)))
	case kindSmallBody:
		return []byte("POST /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n")
	case kindExpect:
		return []byte("POST /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\nExpect: 100-continue\r\n\r\n")
	case kindPipeline:
		return []byte(strings.Repeat(requestLine+"\r\n", pipelined))
	case kindHalfClose:
		return []byte(requestLine)
	case kindH2:
		return []byte(h2Preface)
	case kindNoRead:
		return []byte(requestLine + "\r\n")
	case kindExpectOther:
		return []byte("GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: x\r\nContent-Length: 1000\r\n\r\n")
	case kindManyHeaders:
		return []byte(requestLine + strings.Repeat("a:\r\n", 501) + "\r\n")
	}
	return nil
}

// clientHello returns the first TLS record crypto/tls sends as a client: a
// real ClientHello, captured over an in-memory pipe. It takes at most a few
// seconds; the handshake it starts ends when the pipe closes.
func clientHello() ([]byte, error) {
	client, server := net.Pipe()
	defer server.Close()
	go func() {
		_ = tls.Client(client, &tls.Config{ServerName: "localhost"}).Handshake()
		_ = client.Close()
	}()
	_ = server.SetReadDeadline(time.Now().Add(5 * time.Second))
	var hdr [5]byte
	if _, err := io.ReadFull(server, hdr[:]); err != nil {
		return nil, fmt.Errorf("capturing a TLS ClientHello: %w", err)
	}
	rec := make([]byte, 5+(int(hdr[3])<<8|int(hdr[4])))
	copy(rec, hdr[:])
	if _, err := io.ReadFull(server, rec[5:]); err != nil {
		return nil, fmt.Errorf("capturing a TLS ClientHello: %w", err)
	}
	return rec, nil
}

package listener

import (
	"bytes"
	"net/http"
)

// maxRequestBytes caps what a connection may send before the end of its
// request header: 4 KiB less a byte, room for a kubelet's request (about
// 130 bytes) with many custom httpHeaders. net/http reads up to
// MaxHeaderBytes and 4 KiB more before it refuses a header; below its cap,
// the refusal, with net/http's 431 bytes, costs no goroutine.
const maxRequestBytes = 4<<10 - 1

// headerScanner finds the blank line that ends a request header, across
// reads, and counts the lines up to it. net/http accepts "\n" as well as
// "\r\n" as a line end, so both count.
type headerScanner struct {
	lines     int
	lineEmpty bool // only '\r' since the last '\n'
	done      bool // the blank line has been seen
}

// scan reads p, the next bytes read, and returns what of them follows the
// header, once it has ended. It goes from line end to line end: the room
// rescans a header on every byte a slow client sends.
func (s *headerScanner) scan(p []byte) (after []byte) {
	for len(p) > 0 && !s.done {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			s.lineEmpty = s.lineEmpty && onlyCR(p)
			return nil
		}
		s.lines++
		s.done = s.lineEmpty && onlyCR(p[:i])
		s.lineEmpty = true
		p = p[i+1:]
	}
	if !s.done {
		return nil
	}
	return p
}

// tooManyFields reports whether the lines scanned hold more header fields
// than net/http takes (maxHeaderFields): all but the request line and the
// blank line.
func (s *headerScanner) tooManyFields() bool {
	fields := s.lines - 1
	if s.done {
		fields--
	}
	return fields > maxHeaderFields
}

func onlyCR(p []byte) bool {
	for _, b := range p {
		if b != '\r' {
			return false
		}
	}
	return true
}

// peeked is what a peek found of a connection's request.
type peeked uint8

const (
	peekedIncomplete peeked = iota // part of a header, or no way to look
	peekedComplete                 // a whole request header
	peekedOversized                // maxRequestBytes without the end of a header, or tooManyFields
	peekedEmpty                    // nothing yet
	peekedClosed                   // the client's FIN with nothing before it, or a reset
	peekedUrgent                   // part of a header, then an urgent byte no peek gets past
)

// awaited reports whether a connection so peeked waits in the room for
// more of its header. One whose peek stops at an urgent byte it cannot
// get past (a kernel without SO_PEEK_OFF for TCP) waits there too, until
// its deadline, unanswered, where net/http would read past the byte and
// answer: in net/http's slots a flood of them was evicted and reconnected
// as fast as it was (the reconnect storm), while no probe carries such a
// byte.
func (p peeked) awaited() bool {
	return p == peekedEmpty || p == peekedIncomplete || p == peekedUrgent
}

// request is what parseRequest takes of a header: what the AnswerFunc
// routes, and what tells how net/http would hold the connection after its
// answer.
type request struct {
	method       string // one of knownMethods
	path         []byte // '/' and unreserved bytes, or "*" for OPTIONS
	rawQuery     []byte // after the '?'; empty without one
	http10       bool   // HTTP/1.0; otherwise HTTP/1.1
	length       int64  // the declared Content-Length; 0 for none
	chunked      bool   // Transfer-Encoding: chunked
	closes       bool   // HTTP/1.0, or Connection: close
	expect       bool   // Expect: 100-continue
	expectFailed bool   // an Expect net/http refuses with 417, instead of the handler
	header       int    // the header's length, blank line included
}

// knownMethods are the methods parseRequest takes, each as the constant it
// hands the AnswerFunc, so that nothing allocates. net/http reads CONNECT
// and the HTTP/2 preface (PRI) by rules of their own.
var knownMethods = [...]string{
	http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
	http.MethodPatch, http.MethodDelete, http.MethodOptions, http.MethodTrace,
}

// parseRequest reports whether req, the start of what a connection has
// sent, holds a whole request header of this subset, and returns it. Each
// part is chosen so that net/http is known to hand such a request to the
// handler unchanged:
//
//   - A request line of one of knownMethods, a path of '/' and RFC 3986's
//     unreserved bytes, starting with '/', with an optional query of
//     printable ASCII (or "*" for OPTIONS), and HTTP/1.1 or HTTP/1.0,
//     separated by single spaces. Such a path reaches the handler as its
//     bytes (URL.Path, RawPath empty), so the AnswerFunc routes what the
//     handler would; anything else (an absolute or escaped target, extra
//     spaces or tabs, another version, leading blank lines) is net/http's.
//   - Lines that end in CRLF, each header line a token name, a colon and a
//     value of printable ASCII, spaces and tabs: net/http also accepts a
//     bare LF, obs-text bytes and names with a space before the colon, and
//     folds continuation lines, each by rules of its own (a name with a
//     space is kept unmatched, so "Host : x" is no Host at all).
//   - For HTTP/1.1 exactly one Host header and for HTTP/1.0 at most one,
//     of host characters: net/http refuses a missing or duplicated Host.
//   - A body, if any, declared by one Content-Length of at most 18 digits,
//     or for HTTP/1.1 by one "Transfer-Encoding: chunked" without a
//     Content-Length: net/http refuses every other framing, or reads it by
//     rules of its own, where request smuggling lives.
//   - No Trailer or Upgrade header (a protocol switch is never a probe),
//     and at most one non-empty Expect, on HTTP/1.1 only: net/http answers
//     417 to any but "100-continue", with no handler, and in HTTP/1.0
//     words of its own.
//   - At most one Connection header, a list of tokens, and for HTTP/1.1
//     only: net/http's answer to a 1.0 request asking for keep-alive
//     depends on Go's version ("Connection: keep-alive" on 1.26, though it
//     then closes; none on 1.27).
//
// What follows the blank line is the body, or a request sent after this
// one, which net/http never answers with keep-alive off. Being stricter
// than net/http only sends a request to net/http; any looser would risk
// an answer net/http would not give (TestShortPathMatchesNetHTTP and
// FuzzShortPath compare them).
func parseRequest(req []byte) (request, bool) {
	var r request
	line, rest, ok := cutLine(req)
	if !ok || !r.parseRequestLine(line) {
		return r, false
	}
	var hosts, lengths, codings, connections, expects int
	for {
		line, rest, ok = cutLine(rest)
		if !ok {
			return r, false
		}
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok || !isToken(name) || !isFieldValue(value) {
			return r, false
		}
		value = bytes.Trim(value, " \t")
		switch {
		case equalFoldASCII(name, "Host"):
			hosts++
			ok = isHost(value)
		case equalFoldASCII(name, "Content-Length"):
			lengths++
			r.length, ok = parseLength(value)
		case equalFoldASCII(name, "Transfer-Encoding"):
			codings++
			r.chunked, ok = true, equalFoldASCII(value, "chunked") && !r.http10
		case equalFoldASCII(name, "Connection"):
			connections++
			r.closes, ok = connectionCloses(value)
			ok = ok && !r.http10
		case equalFoldASCII(name, "Expect"):
			expects++
			r.expect = hasToken(value, "100-continue")
			r.expectFailed = !r.expect
			ok = len(value) > 0 && !r.http10
		case equalFoldASCII(name, "Trailer"), equalFoldASCII(name, "Upgrade"):
			ok = false
		}
		if !ok {
			return r, false
		}
	}
	if hosts > 1 || hosts == 0 && !r.http10 || lengths+codings > 1 || connections > 1 || expects > 1 {
		return r, false
	}
	r.closes = r.closes || r.http10
	r.header = len(req) - len(rest)
	return r, true
}

// plainLines reports whether b, whole lines of a header's start, holds
// only lines parseRequest takes, and so none net/http refuses.
func plainLines(b []byte) bool {
	var r request
	line, rest, ok := cutLine(b)
	if !ok || !r.parseRequestLine(line) {
		return false
	}
	for len(rest) > 0 {
		if line, rest, ok = cutLine(rest); !ok {
			return false
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok || !isToken(name) || !isFieldValue(value) {
			return false
		}
	}
	return true
}

// headerEnd is where the blank line ("\r\n" or "\n", as net/http reads
// one) that ends the header in b starts, or len(b) without one. A blank
// first line is no end: net/http refuses it.
func headerEnd(b []byte) int {
	for start, i := 0, 0; ; start = i + 1 {
		if i = bytes.IndexByte(b[start:], '\n') + start; i < start {
			return len(b)
		}
		if start > 0 && (i == start || i == start+1 && b[start] == '\r') {
			return start
		}
	}
}

// parseRequestLine reads the request line into r.
func (r *request) parseRequestLine(line []byte) bool {
	method, line, _ := bytes.Cut(line, []byte(" "))
	for _, m := range knownMethods {
		if string(method) == m {
			r.method = m
		}
	}
	switch {
	case r.method == "":
		return false
	case bytes.HasSuffix(line, []byte(" HTTP/1.1")):
		line = line[:len(line)-len(" HTTP/1.1")]
	case bytes.HasSuffix(line, []byte(" HTTP/1.0")):
		line, r.http10 = line[:len(line)-len(" HTTP/1.0")], true
	default:
		return false
	}
	if string(line) == "*" && r.method == http.MethodOptions {
		r.path = line
		return true
	}
	path, query, _ := bytes.Cut(line, []byte("?"))
	r.path, r.rawQuery = path, query
	return len(path) > 0 && path[0] == '/' && allIn(path, &pathBytes) && allIn(query, &queryBytes)
}

// hasToken reports whether v holds token, of letters, digits and '-',
// ignoring ASCII case, as net/http reads Expect: anywhere between a space,
// a comma, a tab or v's ends, so that "x 100-continue" holds it too.
func hasToken(v []byte, token string) bool {
	for at := 0; at+len(token) <= len(v); at++ {
		end := at + len(token)
		if (at == 0 || isTokenBoundary(v[at-1])) && (end == len(v) || isTokenBoundary(v[end])) && equalFoldASCII(v[at:end], token) {
			return true
		}
	}
	return false
}

func isTokenBoundary(c byte) bool { return c == ' ' || c == ',' || c == '\t' }

// connectionCloses reads a Connection value, a comma-separated list of
// tokens, and reports whether it holds "close", on which net/http reads
// no body before it closes.
func connectionCloses(v []byte) (closes, ok bool) {
	for len(v) > 0 {
		var token []byte
		token, v, _ = bytes.Cut(v, []byte(","))
		token = bytes.Trim(token, " \t")
		if len(token) > 0 && !isToken(token) {
			return false, false
		}
		closes = closes || equalFoldASCII(token, "close")
	}
	return closes, true
}

// parseLength reads a Content-Length value: 1 to 18 digits, a bound far
// past any body a connection is held for.
func parseLength(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// cutLine cuts b after its first LF, and returns the line before it and
// what follows; false when there is no LF, or no CR before it. A CR
// elsewhere is left to the checks of the line's parts, which refuse it.
func cutLine(b []byte) (line, rest []byte, ok bool) {
	i := bytes.IndexByte(b, '\n')
	if i < 1 || b[i-1] != '\r' {
		return nil, nil, false
	}
	return b[:i-1], b[i+1:], true
}

// isToken reports whether s is an HTTP token (RFC 9110, 5.6.2), as header
// names must be.
func isToken(s []byte) bool { return len(s) > 0 && allIn(s, &tokenBytes) }

// isFieldValue reports whether s holds only printable ASCII, spaces and
// tabs: net/http also takes bytes of 0x80 and above, which no probe needs.
func isFieldValue(s []byte) bool { return allIn(s, &fieldValueBytes) }

// isHost reports whether s is a non-empty host of letters, digits and
// "-.:[]_~%": a name, an IP literal, a port, an IPv6 zone. net/http takes a
// few more bytes, and an empty Host, which no probe needs.
func isHost(s []byte) bool { return len(s) > 0 && allIn(s, &hostBytes) }

var (
	tokenBytes      = byteSet("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ!#$%&'*+-.^_`|~")
	hostBytes       = byteSet("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-.:[]_~%")
	pathBytes       = byteSet("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-._~/")
	queryBytes      = printableASCII("") // no space
	fieldValueBytes = printableASCII(" \t")
)

func printableASCII(extra string) [256]bool {
	set := byteSet(extra)
	for c := '!'; c <= '~'; c++ {
		set[c] = true
	}
	return set
}

func byteSet(members string) (set [256]bool) {
	for i := range len(members) {
		set[members[i]] = true
	}
	return set
}

func allIn(s []byte, set *[256]bool) bool {
	for _, c := range s {
		if !set[c] {
			return false
		}
	}
	return true
}

// equalFoldASCII reports whether the token s is name, a header name of
// letters and '-', ignoring ASCII case, as net/http matches header names
// once it has canonicalised them. Setting bit 0x20 folds a letter's case,
// leaves '-' as it is, and maps no other token byte onto either.
func equalFoldASCII(s []byte, name string) bool {
	if len(s) != len(name) {
		return false
	}
	for i, c := range s {
		if c|0x20 != name[i]|0x20 {
			return false
		}
	}
	return true
}

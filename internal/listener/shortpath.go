package listener

import (
	"bytes"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// shortPath answers plain probes in Accept, from the bytes the peek
// already holds, without handing their connections to net/http.
//
// The kernel's accept queue is first in, first out. A local client that
// keeps it full of complete requests, each on a fresh connection, makes the
// kubelet's probe wait behind all of them, or has its handshake dropped
// once the queue overflows: how fast Serve drains that queue is how soon
// the probe gets its turn. Through net/http every connection costs a
// goroutine, a 4 KiB read buffer, a write buffer and a map of every request
// header (some 60 entries for a 4 KiB request) before it is answered, and
// holds a slot until that goroutine ends. At accept, a plain probe costs a
// parse of the peeked bytes, a table lookup, a read of those bytes, a write
// and a close, in the accepting goroutine and its reused buffers, so the
// queue drains at the kernel's pace: no goroutine, no buffer and no header
// map per connection, and 7 allocations on Linux, all but one (the
// connection's syscall.RawConn, see connCalls) net's own
// TCPListener.Accept's.
//
// The answer is the one net/http would write, byte for byte, but the Date
// value, and it is counted alike, so that nothing tells which path
// answered a probe (TestShortPathMatchesNetHTTP and FuzzShortPath compare
// the bytes with net/http's). So the short path takes only requests that
// net/http is known to answer with the handler's plain answer
// (parseRequest lists them, and why each exclusion), and every other
// request reaches net/http exactly as before.
//
// A shortPath is used by one goroutine (see reader), so its buffers need
// no lock.
type shortPath struct {
	route AnswerFunc
	buf   []byte // the answer being written, reused
	// date is the Date value of the second dateSecond, as net/http
	// writes it: formatted once a second, not once an answer.
	date       []byte
	dateSecond int64
}

func newShortPath(route AnswerFunc) *shortPath {
	return &shortPath{
		route:      route,
		buf:        make([]byte, 0, 1024),
		date:       make([]byte, 0, len(http.TimeFormat)),
		dateSecond: -1 << 63,
	}
}

// answer answers nc, if what nc has sent, the first n bytes the peek
// copied into buf, is a request parseRequest takes; calls is the connCalls
// that peeked nc. It returns false when it is not one, or when the answer
// would leave nc to be held (hold.go) and canHold is false, having done
// nothing: net/http is to serve nc. Otherwise nc is closed, or its hold
// returned for the room to keep.
//
// The request is read before the answer is written because Linux answers
// a close with unread bytes in the receive queue by a reset, which can
// destroy the answer before the client reads it; once they are read, the
// close sends a FIN behind the answer, and the client reads the whole
// answer and then EOF, as from net/http, which has read them into its
// buffer. The bytes are those the peek saw, already in the queue, so the
// read returns at once; should it not return them all, the connection is
// broken, and it is closed unanswered and uncounted, as net/http counts an
// answer only once it has read the request.
//
// The answer, under 1 KiB, goes into the empty send buffer of a fresh
// socket, so the write completes at once. Should it not (no buffer memory,
// or the client already reset), the connection is closed anyway, as
// net/http's write timeout would end it: nothing waits for a client here.
func (sp *shortPath) answer(calls *connCalls, nc net.Conn, buf []byte, n int, canHold bool) (bool, holdKind, drain) {
	answer, counter, req, ok := sp.respond(buf, n)
	if !ok {
		return false, holdNone, drain{}
	}
	kind, d := holdFor(&req, buf[req.header:n])
	if kind != holdNone && !canHold {
		return false, holdNone, drain{}
	}
	if !calls.read(buf[:n]) {
		kind = holdNone
	} else {
		counter.Add(1) // as the handler counts, between the read and the write
		calls.write(answer)
	}
	switch kind {
	case holdNone:
		_ = nc.Close()
	case holdLinger:
		shutWrite(nc)
	}
	return true, kind, d
}

// shutWrite sends the FIN net/http sends before its linger.
func shutWrite(nc net.Conn) {
	if cw, ok := nc.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}

// respond returns the answer to the request in buf[:n], the counter the
// handler would count it in, and the request, if parseRequest takes it
// and the AnswerFunc answers it. The answer is valid until the next call.
func (sp *shortPath) respond(buf []byte, n int) ([]byte, *atomic.Uint64, request, bool) {
	req, ok := parseRequest(buf[:n])
	if !ok {
		return nil, nil, req, false
	}
	resp, counter := sp.route(req.method, req.path, req.rawQuery)
	if resp == nil {
		return nil, nil, req, false
	}
	sp.buf = sp.appendAnswer(sp.buf[:0], &req, resp, time.Now())
	return sp.buf, counter, req, true
}

// appendAnswer appends resp, the answer to p, as net/http writes it: the
// status line with the request's version, the handler's header lines, the
// Date net/http adds, "Connection: close" for HTTP/1.1 only
// (keep-alive is off, and to an HTTP/1.0 client a close needs no saying),
// a blank line, and the body unless the method is HEAD. A HEAD answer keeps
// the handler's Content-Length.
func (sp *shortPath) appendAnswer(dst []byte, p *request, resp *Response, now time.Time) []byte {
	if p.http10 {
		dst = append(dst, "HTTP/1.0 "...)
	} else {
		dst = append(dst, "HTTP/1.1 "...)
	}
	dst = strconv.AppendInt(dst, int64(resp.Status), 10)
	dst = append(dst, ' ')
	dst = append(dst, http.StatusText(resp.Status)...)
	dst = append(dst, "\r\n"...)
	dst = append(dst, resp.Header...)
	dst = append(dst, "Date: "...)
	dst = append(dst, sp.dateOf(now)...)
	if !p.http10 {
		dst = append(dst, "\r\nConnection: close"...)
	}
	dst = append(dst, "\r\n\r\n"...)
	if p.method != http.MethodHead {
		dst = append(dst, resp.Body...)
	}
	return dst
}

// dateOf returns now as net/http writes a Date header.
func (sp *shortPath) dateOf(now time.Time) []byte {
	if s := now.Unix(); s != sp.dateSecond {
		sp.date = now.UTC().AppendFormat(sp.date[:0], http.TimeFormat)
		sp.dateSecond = s
	}
	return sp.date
}

// request is a request the short path answers: a request line and header
// of the subset parseRequest takes, and what net/http would hold its
// connection for after the answer (see hold.go).
type request struct {
	method   string // one of knownMethods
	path     []byte // '/' and unreserved bytes, or "*" for OPTIONS
	rawQuery []byte // after the '?'; empty without one
	http10   bool   // HTTP/1.0; otherwise HTTP/1.1
	length   int64  // the declared Content-Length; 0 for none
	chunked  bool   // Transfer-Encoding: chunked
	closes   bool   // HTTP/1.0, or Connection: close
	header   int    // the header's length, blank line included
}

// knownMethods are the methods the short path takes, each as the constant
// string it hands the AnswerFunc, which must not allocate. net/http treats
// CONNECT's target and the HTTP/2 preface's PRI specially, and any other
// token is rare enough to leave to it.
var knownMethods = [...]string{
	http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
	http.MethodPatch, http.MethodDelete, http.MethodOptions, http.MethodTrace,
}

// parseRequest reports whether req, the start of what a new connection
// has sent, holds a whole request header the short path can answer, and
// returns it. It takes only this subset, each part chosen so that net/http
// is known to hand the request to the handler unchanged:
//
//   - A request line of exactly one of knownMethods, a target of a path
//     made of '/' and RFC 3986's unreserved bytes, starting with '/', with
//     an optional query of printable ASCII (or "*" for OPTIONS), and
//     HTTP/1.1 or HTTP/1.0, separated by single spaces: anything else (an
//     absolute or escaped target, extra spaces or tabs, another version,
//     leading blank lines) is net/http's to parse, reject, route or
//     answer. Such a path reaches net/http's handler unchanged (URL.Path
//     is the bytes, RawPath empty), so the AnswerFunc routes what the
//     handler would.
//   - Lines that end in CRLF, each header line a token name, a colon and a
//     value of printable ASCII, spaces and tabs: net/http also accepts a
//     bare LF, obs-text bytes and names with a space before the colon, and
//     folds continuation lines, each with rules of its own (a name with a
//     space is kept unmatched, so "Host : x" is no Host at all).
//   - For HTTP/1.1 exactly one Host header and for HTTP/1.0 at most one,
//     of host characters: net/http refuses a missing or duplicated Host
//     with 400.
//   - A body, if any, declared by one Content-Length of at most 18 digits,
//     or for HTTP/1.1 by one "Transfer-Encoding: chunked" without a
//     Content-Length: every other framing (two lengths, a sign, another
//     coding) is one net/http refuses or reads by rules of its own, and
//     where request smuggling lives.
//   - No Trailer or Upgrade header, and an Expect only of "100-continue"
//     on HTTP/1.1: net/http answers 417 to any other, and a protocol
//     switch is never a probe.
//   - At most one Connection header, a list of tokens, and for HTTP/1.1
//     only: on Go 1.26 net/http answers a 1.0 request that asks for
//     keep-alive with "Connection: keep-alive", even though it then
//     closes, and on Go 1.27 with no Connection header; the exclusion
//     keeps the short path out of a version-dependent answer.
//
// What follows the blank line is the body, or a request sent after this
// one, which net/http never answers with keep-alive off. Being stricter
// than net/http only costs the request the short path; any looser would
// risk an answer net/http would not give. The caps on the header's size
// and lines were checked by the peek.
func parseRequest(req []byte) (request, bool) {
	var r request
	line, rest, ok := cutLine(req)
	if !ok || !r.parseRequestLine(line) {
		return r, false
	}
	var hosts, lengths, codings, connections int
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
			ok = equalFoldASCII(value, "100-continue") && !r.http10
		case equalFoldASCII(name, "Trailer"), equalFoldASCII(name, "Upgrade"):
			ok = false
		}
		if !ok {
			return r, false
		}
	}
	if hosts > 1 || hosts == 0 && !r.http10 || lengths+codings > 1 || connections > 1 {
		return r, false
	}
	r.closes = r.closes || r.http10
	r.header = len(req) - len(rest)
	return r, true
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
// what follows. It reports false when there is no LF, or no CR before it.
// A CR anywhere else in the line is left to the checks of its parts, which
// all refuse control bytes.
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
// tabs: net/http also takes bytes of 0x80 and above, the short path does
// not need to.
func isFieldValue(s []byte) bool { return allIn(s, &fieldValueBytes) }

// isHost reports whether s is a non-empty host of letters, digits and
// "-.:[]_~%": a name, an IP literal, a port, an IPv6 zone. net/http takes a
// few more bytes (and an empty Host); the short path does not need to.
func isHost(s []byte) bool { return len(s) > 0 && allIn(s, &hostBytes) }

var (
	tokenBytes = byteSet("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ!#$%&'*+-.^_`|~")
	hostBytes  = byteSet("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-.:[]_~%")
	pathBytes  = byteSet("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-._~/")
	// A query is printable ASCII but the space; a field value may hold
	// spaces and tabs too.
	queryBytes      = printableASCII("")
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

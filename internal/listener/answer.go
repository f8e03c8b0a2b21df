package listener

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// A reader is what a goroutine that takes connections in (the accepting
// one, the room's) uses to look at them and answer them without net/http:
// its system calls and buffers, its own, so that none needs a lock.
//
// Why answer here: the kernel's accept queue is first in, first out, and a
// local client that keeps it full of requests, each on a fresh connection,
// makes the kubelet's probe wait behind all of them. Through net/http each
// costs a goroutine, buffers and a map of every header line; here a parse
// of the peeked bytes, a table lookup, a read, a write and a close, in
// reused buffers, so the queue drains at the kernel's pace. The answer is
// net/http's, byte for byte but the Date value, and counted alike.
type reader struct {
	calls      *connCalls
	buf        []byte        // the peek's, maxRequestBytes long, with room for a line end
	route      AnswerFunc    // nil: nothing is answered here
	out        []byte        // the answer being written
	unread     bytes.Reader  // refusedByNetHTTP's input to net/http's parser
	lines      *bufio.Reader // and its reader
	date       []byte        // the Date value of dateSecond, formatted once a second
	dateSecond int64
}

func newReader(route AnswerFunc) *reader {
	return &reader{
		calls:      newConnCalls(),
		buf:        make([]byte, maxRequestBytes, maxRequestBytes+len("\r\n")),
		lines:      bufio.NewReader(nil),
		route:      route,
		out:        make([]byte, 0, 1024),
		date:       make([]byte, 0, len(http.TimeFormat)),
		dateSecond: -1 << 63,
	}
}

// peek looks at what has arrived on nc so far, a connection just accepted
// (connCalls.peek).
func (r *reader) peek(nc net.Conn) (peeked, int) { return r.calls.peek(nc, r.buf, true, false) }

// repeek looks again at all that has arrived on nc, a connection in the
// room, and reports whether its peek offset now stands past it, for
// unchanged to go on from: not on a kernel without the option, nor where
// an urgent byte was possible, whose peek may unset the offset. While one
// is pending, every arrival reports it, and is peeked at whole.
func (r *reader) repeek(nc net.Conn, urgentPossible bool) (peeked, int, bool) {
	p, n := r.calls.peek(nc, r.buf, urgentPossible, true)
	return p, n, r.calls.rewound && !urgentPossible
}

// unchanged peeks at what has arrived on nc, a connection in the room,
// since its last peek, from its peek offset, which stood at *seen bytes
// whose lines are header's, and reports whether it leaves nothing to
// decide: no line has ended, and the caps are not reached. Every segment
// a client sends is a buffer of its own in the kernel, which a peek
// copies one by one: a header trickled a byte at a time, peeked whole on
// each arrival, cost 1.6× a plain server's CPU (docs/load.md).
func (r *reader) unchanged(nc net.Conn, seen *int, header *headerScanner) bool {
	if *seen >= maxRequestBytes {
		return false
	}
	n, ok := r.calls.peekMore(nc, r.buf[:maxRequestBytes-*seen])
	if !ok {
		return false // ended or failed: the whole peek says how
	}
	lines := header.lines
	header.scan(r.buf[:n])
	*seen += n
	return header.lines == lines && *seen < maxRequestBytes
}

// settle deals with nc by what r's peek of it, p of n bytes, found, and
// reports whether it did: a header net/http refuses is refused, one whose
// client has gone closed, and a request parseRequest takes answered. What
// is then to be held is returned for the room to keep.
func (r *reader) settle(nc net.Conn, p peeked, n int, parses *uint8) (bool, holdKind, drain) {
	switch {
	case (p == peekedIncomplete || p == peekedOversized) && r.refusedByNetHTTP(n, false, parses):
		return true, r.refuseMalformed(nc), drain{}
	case p == peekedOversized:
		return true, r.refuse(nc, n), drain{}
	case p == peekedClosed:
		r.discard(nc) // an urgent byte may be left, which would make the close a reset
		_ = nc.Close()
	case p == peekedComplete && r.route != nil:
		return r.answer(nc, n)
	default:
		return false, holdNone, drain{}
	}
	return true, holdNone, drain{}
}

// answer answers nc, if its first n bytes, in r.buf, are a request
// parseRequest takes, and returns false, having done nothing, if not.
// The request is read before the answer is written, so that the close is
// a FIN, not a reset (see rstAvoidanceDelay); a read short of the bytes
// the peek saw means the connection is broken, closed unanswered and
// uncounted, as net/http counts a request only once read. The answer,
// under 1 KiB into an empty send buffer, takes one write that never
// waits: what the buffer does not take is dropped, as net/http's write
// timeout would end it.
func (r *reader) answer(nc net.Conn, n int) (bool, holdKind, drain) {
	answer, counter, req, ok := r.respond(r.buf[:n])
	if !ok {
		return false, holdNone, drain{}
	}
	kind, d := holdFor(&req, r.buf[req.header:n])
	if !r.calls.read(r.buf[:n]) {
		kind = holdNone
	} else {
		counter.Add(1) // as the handler counts, between the read and the write
		r.calls.write(answer)
	}
	return true, endOrHold(nc, kind), d
}

// respond returns the answer to the request in b, the counter the
// handler would count it in, and the request, if parseRequest takes it
// and the AnswerFunc answers it. The answer is valid until the next call.
func (r *reader) respond(b []byte) ([]byte, *atomic.Uint64, request, bool) {
	req, ok := parseRequest(b)
	if !ok {
		return nil, nil, req, false
	}
	if req.expectFailed { // net/http's 417, without the handler, so counted nowhere
		r.out = append(append(r.out[:0], "HTTP/1.1 417 Expectation Failed\r\nDate: "...), r.dateOf(time.Now())...)
		r.out = append(r.out, "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"...)
		return r.out, &uncounted, req, true
	}
	resp, counter := r.route(req.method, req.path, req.rawQuery)
	if resp == nil {
		return nil, nil, req, false
	}
	r.out = r.appendAnswer(r.out[:0], &req, resp, time.Now())
	return r.out, counter, req, true
}

// appendAnswer appends resp, the answer to req, as net/http writes it: the
// status line in the request's version, the handler's header lines, the
// Date net/http adds, "Connection: close" for HTTP/1.1 only (keep-alive is
// off, which to an HTTP/1.0 client needs no saying), a blank line, and the
// body unless the method is HEAD, whose answer keeps the Content-Length.
func (r *reader) appendAnswer(dst []byte, req *request, resp *Response, now time.Time) []byte {
	if req.http10 {
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
	dst = append(dst, r.dateOf(now)...)
	if !req.http10 {
		dst = append(dst, "\r\nConnection: close"...)
	}
	dst = append(dst, "\r\n\r\n"...)
	if req.method != http.MethodHead {
		dst = append(dst, resp.Body...)
	}
	return dst
}

// uncounted counts the answers net/http gives without the handler.
var uncounted atomic.Uint64

// dateOf returns now as net/http writes a Date header.
func (r *reader) dateOf(now time.Time) []byte {
	if s := now.Unix(); s != r.dateSecond {
		r.date = now.UTC().AppendFormat(r.date[:0], http.TimeFormat)
		r.dateSecond = s
	}
	return r.date
}

// response431 and response400 are net/http's answers to an oversized
// header and to one it cannot parse, byte for byte
// (TestResponse431IsNetHTTPs and TestPartialHeadersAsNetHTTP compare
// them).
const (
	response431 = "HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n431 Request Header Fields Too Large"
	response400 = "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request"
)

var response431Bytes, response400Bytes = []byte(response431), []byte(response400)

// maxParses is how often net/http's parser may judge a connection's
// header before its deadline (refusedByNetHTTP): one whose lines a probe
// could send needs none.
const maxParses = 4

// refusedByNetHTTP reports whether net/http, having read the first n bytes
// of a header not yet whole or over the caps, in r.buf, refuses it, as it
// does a line it cannot parse, before the header ends. It reads line by
// line, so only whole lines count, up to the header's end (past it, a
// missing Host or an unknown coding is the server's verdict, not the
// parser's); once its read deadline passes (timedOut), it parses the line
// it was cut off in as if it had ended. Its own parser decides, so the
// verdict is net/http's on every Go. net/http judges a header line with a
// colon only once the next byte says whether a continuation follows; here
// it is judged at once. No continuation mends a line so refused: net/http
// answers the same 400 later, or a 431 if the continuation overflows its
// cap.
//
// A parse costs microseconds and allocations (24 µs and 13 KB on 62 lines
// of obs-text, BenchmarkRefusedByNetHTTP), and the room asks on every
// arrival: lines plainLines takes, every probe's, skip it, and the rest
// spend *parses, the connection's budget of them (maxParses); once it is
// spent, the verdict waits for the deadline. Without the budget, a client
// sending such lines a byte at a time cost a parse a byte.
func (r *reader) refusedByNetHTTP(n int, timedOut bool, parses *uint8) bool {
	b := r.buf[:n]
	if i := bytes.LastIndexByte(b, '\n'); !timedOut {
		b = b[:i+1]
	} else if i < n-1 {
		b = append(b, "\r\n"...) // within buf's capacity: no allocation
	}
	b = b[:headerEnd(b)]
	if len(b) == 0 || *parses == 0 || plainLines(b) {
		return false
	}
	*parses--
	r.unread.Reset(b)
	r.lines.Reset(&r.unread)
	_, err := http.ReadRequest(r.lines)
	return err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF)
}

// refuseMalformed answers a header net/http would have refused with
// net/http's 400, having read what its client sent (an urgent byte left
// unread would make the close a reset), and closes it without a linger,
// as net/http does.
func (r *reader) refuseMalformed(nc net.Conn) holdKind {
	r.discard(nc)
	r.calls.write(response400Bytes)
	return endOrHold(nc, holdNone)
}

// timedOut ends nc, whose header did not arrive whole within
// headerTimeout, as net/http's read deadline does: with a 400 if the
// header's last line, cut off, makes it one net/http refuses, read first.
func (r *reader) timedOut(nc net.Conn) {
	p, n := r.calls.peek(nc, r.buf, true, true)
	last := uint8(1)
	refused := p == peekedIncomplete && r.refusedByNetHTTP(n, true, &last)
	r.discard(nc)
	if refused {
		r.calls.write(response400Bytes)
	}
	_ = nc.Close()
}

// refuse answers a header over the caps, its first n bytes in r.buf, and
// lingers, as net/http does.
func (r *reader) refuse(nc net.Conn, n int) holdKind {
	r.calls.read(r.buf[:n])
	r.calls.write(response431Bytes)
	return endOrHold(nc, holdLinger)
}

// drain reads and discards what has arrived of nc's body, and returns
// what follows. failed says the epoll set saw the connection fail.
func (r *reader) drain(nc net.Conn, d *drain, failed bool) holdKind {
	kind := holdDrain
	for kind == holdDrain {
		n, ok := r.calls.readFrom(nc, r.buf)
		switch {
		case failed || !ok:
			kind = d.giveUp(failedDrain) // the client's FIN, or a reset
		case n == 0:
			return holdDrain // nothing more yet
		default:
			kind = d.consume(r.buf[:n])
		}
	}
	return endOrHold(nc, kind)
}

// discard reads what nc's client has sent, a header not yet whole, so
// that its close is a FIN. It reads until nothing is left, not only what a
// peek saw: a read stops at an urgent mark, and the next skips the urgent
// byte, which, left queued, would make the close a reset. Four reads of
// the peek's buffer take any header under the caps.
func (r *reader) discard(nc net.Conn) {
	for range 4 {
		if n, ok := r.calls.readFrom(nc, r.buf); !ok || n == 0 {
			return
		}
	}
}

// endOrHold closes nc for holdNone, or for holdLinger shuts its sending
// side, and returns kind.
func endOrHold(nc net.Conn, kind holdKind) holdKind {
	switch kind {
	case holdNone:
		_ = nc.Close()
	case holdLinger:
		if cw, ok := nc.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
	}
	return kind
}

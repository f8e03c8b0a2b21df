package listener

import (
	"net/http"
	"strconv"
	"time"
)

// The listener's own answers, to what no probe sends: a header that is not
// well formed, and one over maxHeader. Short and constant, with nothing of
// the request in them.
const (
	answer400 = "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 16\r\nConnection: close\r\n\r\n400 Bad Request\n"
	answer431 = "HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 36\r\nConnection: close\r\n\r\n431 Request Header Fields Too Large\n"
)

// answerWriter writes the caller's answers, in a buffer of its own that
// each answer reuses.
type answerWriter struct {
	out        []byte
	date       []byte // the Date value of dateSecond
	dateSecond int64
}

func newAnswerWriter() *answerWriter {
	return &answerWriter{out: make([]byte, 0, 1024), dateSecond: -1}
}

// write returns resp as the answer to req, valid until the next call. To a
// probe it is what net/http writes, but the Date value: the status line in
// the request's version, the caller's header lines, Date, then
// "Connection: close" for HTTP/1.1, as keep-alive is off (to HTTP/1.0 that
// needs no saying), a blank line, and the body unless the method is HEAD,
// whose answer keeps the Content-Length. To a client that may still send,
// "Connection: close" is said in either version: what it sends next is
// never read as a request.
func (w *answerWriter) write(req *request, resp *Response, now time.Time) []byte {
	b := w.out[:0]
	if req.http10 {
		b = append(b, "HTTP/1.0 "...)
	} else {
		b = append(b, "HTTP/1.1 "...)
	}
	b = strconv.AppendInt(b, int64(resp.Status), 10)
	b = append(b, ' ')
	b = append(b, http.StatusText(resp.Status)...)
	b = append(b, "\r\n"...)
	b = append(b, resp.Header...)
	b = append(b, "Date: "...)
	b = append(b, w.dateOf(now)...)
	if !req.http10 || req.mayStillSend {
		b = append(b, "\r\nConnection: close"...)
	}
	b = append(b, "\r\n\r\n"...)
	if string(req.method) != http.MethodHead {
		b = append(b, resp.Body...)
	}
	w.out = b
	return b
}

// dateOf returns now as net/http writes a Date, formatted once a second.
func (w *answerWriter) dateOf(now time.Time) []byte {
	if s := now.Unix(); s != w.dateSecond {
		w.date = now.UTC().AppendFormat(w.date[:0], http.TimeFormat)
		w.dateSecond = s
	}
	return w.date
}

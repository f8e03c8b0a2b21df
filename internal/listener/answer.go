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

// encoder makes the bytes of the caller's answers, in a buffer of its own
// that each reuses.
type encoder struct {
	out        []byte
	date       []byte // the Date value of dateSecond; nil before the first
	dateSecond int64
}

// encode returns resp as the answer to req, valid until the next call: to a
// probe, net/http's bytes but the Date value. It says "Connection: close"
// to HTTP/1.1 (keep-alive is off; to HTTP/1.0 that goes without saying),
// and to a client that may still send, in either version, as what it
// sends next is never read as a request. HEAD keeps the Content-Length.
func (w *encoder) encode(req *request, resp *Response, now time.Time) []byte {
	version := "HTTP/1.1 "
	if req.http10 {
		version = "HTTP/1.0 "
	}
	b := strconv.AppendInt(append(w.out[:0], version...), int64(resp.Status), 10)
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
func (w *encoder) dateOf(now time.Time) []byte {
	if s := now.Unix(); s != w.dateSecond || w.date == nil {
		w.date = now.UTC().AppendFormat(w.date[:0], http.TimeFormat)
		w.dateSecond = s
	}
	return w.date
}

package probetest

import (
	"strconv"
	"strings"
)

// Probes returns requests of every shape a probe, or a client library,
// sends: GET and HEAD (and other methods, for their 405), origin- and
// absolute-form targets with every query form, HTTP/1.1 and HTTP/1.0,
// header lines such a client writes, no body. Serve answers each exactly as
// a plain net/http server does, but the Date value.
//
// HTTP/1.0 with "Connection: keep-alive" is left out: net/http's answer
// to it changed between Go releases; Serve's is Go 1.27's (no Connection
// header).
func Probes() []string {
	targets := []string{
		"/healthz", "/healthz?verbose", "/healthz?",
		"/readyz", "/readyz?", "/readyz?verbose", "/readyz?verbose=1", "/readyz?x=1&verbose",
		"/readyz?verb%6Fse", "/readyz?verbosex=1&x=verbose", "/readyz?verbose#frag", "/readyz#x",
		"/readyz?a=1;verbose", "/readyz?a=1;b&verbose", "/readyz?%zz&verbose", "/readyz?verbose=%zz",
		"/readyz??verbose", "/readyz?verbose&verbose", "/readyz?+verbose", "/readyz?%20verbose",
		"/readyz?" + strings.Repeat("q", 200) + "&verbose",
		"/readyz/data-plane", "/readyz/data-plane-check?verbose", "/readyz/nope", "/readyz/registration/",
		"/readyz?exclude=registration&exclude=event-delivery&exclude=subsystems",
		"/readyz?exclude=data%2Dplane&verbose&exclude=nope",
		"/", "/metrics", "/healthz/", "//healthz", "/./readyz", "/x/../readyz", "/%68ealthz", "/HEALTHZ",
		"http://127.0.0.1:9101/readyz?verbose", "http://node-a/healthz", "HTTP://x/readyz", "http://x", "http://x?verbose",
		"http:///healthz",
	}
	headers11 := []string{
		"Host: x\r\n",
		"Host: 127.0.0.1:9101\r\nUser-Agent: kube-probe/1.31\r\nAccept: */*\r\nConnection: close\r\n",
		"Host: 127.0.0.1:9101\r\nUser-Agent: Go-http-client/1.1\r\nAccept-Encoding: gzip\r\n",
		"host:[::1]:9101\r\nconnection: keep-alive\r\n",
		"HOST: \t node-a.example_x~%25 \t\r\nX-Empty:\r\nX-Tabs:\tv\tw\t\r\nAccept-Encoding: gzip\r\nConnection: Upgrade, close\r\n",
		"Host: x\r\nPragma: no-cache\r\nCookie: a=b\r\nTE: trailers\r\nX-Utf8: caf\xc3\xa9\r\nKeep-Alive: 300\r\nContent-Length: 0\r\n",
		"Host: \r\n",
		"Host: x\r\n" + ManyHeaders(60),
	}
	headers10 := []string{
		"",
		"Host: x\r\n",
		"User-Agent: kube-probe/1.31\r\nAccept: */*\r\nConnection: close\r\n",
		"Host: x\r\n" + ManyHeaders(60),
	}
	var reqs []string
	add := func(method, target string) {
		for _, h := range headers11 {
			reqs = append(reqs, method+" "+target+" HTTP/1.1\r\n"+h+"\r\n")
		}
		for _, h := range headers10 {
			reqs = append(reqs, method+" "+target+" HTTP/1.0\r\n"+h+"\r\n")
		}
	}
	for _, target := range targets {
		add("GET", target)
		add("HEAD", target)
	}
	for _, method := range []string{"POST", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE", "get", "BREW"} {
		add(method, "/readyz")
		add(method, "/nothing")
	}
	add("OPTIONS", "*")
	add("GET", "*")
	return reqs
}

// ManyHeaders is n header lines of a probe with custom httpHeaders.
func ManyHeaders(n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString("X-Custom-" + strconv.Itoa(i) + ": value-" + strconv.Itoa(i) + "\r\n")
	}
	return b.String()
}

// Malformed are headers that are not well formed, each named for how:
// Serve answers each with its constant 400, where net/http answers some
// otherwise (a 505, a 501, a 200: it reads some leniently).
var Malformed = []struct{ Name, Raw string }{
	{"bare LF line ends", "GET /healthz HTTP/1.1\nHost: x\n\n"},
	{"a bare LF ends the header", "GET /healthz HTTP/1.1\r\nHost: x\n\r\n"},
	{"a bare LF in the request line", "GET /healthz HTTP/1.1\nHost: x\r\n\r\n"},
	{"a bare CR in a value", "GET /healthz HTTP/1.1\r\nHost: x\r\nX: a\rb\r\n\r\n"},
	{"an empty method", " /healthz HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"two spaces", "GET  /healthz HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"trailing space", "GET /healthz HTTP/1.1 \r\nHost: x\r\n\r\n"},
	{"tab separator", "GET\t/healthz HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"a space in the target", "GET /readyz?a b HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"an 8-bit byte in the target", "GET /readyz?\x80verbose HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"DEL in the target", "GET /readyz?\x7fverbose HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"a malformed escape in the path", "GET /%zzealthz HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"an absolute target's bad authority", "GET http://x y/healthz HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"HTTP/2.0", "GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n"},
	{"HTTP/0.9", "GET /healthz HTTP/0.9\r\n\r\n"},
	{"HTTP/1.10", "GET /healthz HTTP/1.10\r\nHost: x\r\n\r\n"},
	{"lower-case version", "GET /healthz http/1.1\r\nHost: x\r\n\r\n"},
	{"no version", "GET /healthz\r\nHost: x\r\n\r\n"},
	{"leading CRLF", "\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"an empty header", "\r\n\r\n"},
	{"no Host", "GET /healthz HTTP/1.1\r\nAccept: */*\r\n\r\n"},
	{"two Hosts", "GET /healthz HTTP/1.1\r\nHost: x\r\nHost: x\r\n\r\n"},
	{"two Hosts, HTTP/1.0", "GET /healthz HTTP/1.0\r\nHost: x\r\nhost: y\r\n\r\n"},
	{"Host with a space", "GET /healthz HTTP/1.1\r\nHost: a b\r\n\r\n"},
	{"Host with a slash", "GET /healthz HTTP/1.1\r\nHost: a/b\r\n\r\n"},
	{"Host with an 8-bit byte", "GET /healthz HTTP/1.1\r\nHost: \xe9\r\n\r\n"},
	{"space before the colon", "GET /healthz HTTP/1.1\r\nHost : x\r\n\r\n"},
	{"tab before the colon", "GET /healthz HTTP/1.1\r\nHost\t: x\r\n\r\n"},
	{"empty name", "GET /healthz HTTP/1.1\r\nHost: x\r\n: v\r\n\r\n"},
	{"no colon", "GET /healthz HTTP/1.1\r\nHost: x\r\nX\r\n\r\n"},
	{"name with a slash", "GET /healthz HTTP/1.1\r\nHost: x\r\nX/Y: v\r\n\r\n"},
	{"NUL in a name", "GET /healthz HTTP/1.1\r\nHost: x\r\nX\x00: v\r\n\r\n"},
	{"NUL in a value", "GET /healthz HTTP/1.1\r\nHost: x\r\nX: a\x00b\r\n\r\n"},
	{"obs-fold", "GET /healthz HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n"},
	{"obs-fold of Host", "GET /healthz HTTP/1.1\r\nHost: x\r\n\ty\r\n\r\n"},
	{"first line folded", "GET /healthz HTTP/1.1\r\n Host: x\r\n\r\n"},
	{"two Content-Lengths", "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"},
	{"a signed Content-Length", "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: +1\r\n\r\na"},
	{"a Content-Length list", "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0, 0\r\n\r\n"},
	{"an empty Content-Length", "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length:\r\n\r\n"},
	{"the HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"},
}

// MayStillSend are well-formed requests whose client may still be sending
// when it is answered: a body declared or an Expect, each named for what
// it sends. Serve answers each as its method and path get, saying
// "Connection: close" in either version, and never reads the body as one.
var MayStillSend = []struct{ Name, Raw string }{
	{"a declared body never sent", "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n"},
	{"a body sent whole", "GET /readyz HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi"},
	{"more than the body", "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhello"},
	{"a 1 TiB body declared", "POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1099511627776\r\n\r\n"},
	{"a Content-Length of 19 digits", "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000000000000\r\n\r\n"},
	{"a declared body, HTTP/1.0", "POST /healthz HTTP/1.0\r\nContent-Length: 100\r\n\r\n"},
	{"OPTIONS * declaring a body", "OPTIONS * HTTP/1.1\r\nHost: x\r\nContent-Length: 4096\r\n\r\n"},
	{"chunked", "GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
	{"chunked, in part", "GET /readyz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab"},
	{"Transfer-Encoding: identity", "GET /healthz HTTP/1.1\r\nHost: x\r\nTRANSFER-ENCODING: identity\r\n\r\n"},
	{"Transfer-Encoding and Content-Length", "GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n"},
	{"Transfer-Encoding, HTTP/1.0", "GET /healthz HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
	{"Expect: 100-continue, no body", "GET /healthz HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n\r\n"},
	{"Expect: 100-continue, body never sent", "POST /readyz HTTP/1.1\r\nHost: x\r\nExpect: 100-Continue\r\nContent-Length: 10\r\n\r\n"},
	{"Expect: other", "GET /readyz HTTP/1.1\r\nHost: x\r\nexpect: x\r\n\r\n"},
	{"Expect, HTTP/1.0", "HEAD /healthz HTTP/1.0\r\nExpect: foo\r\n\r\n"},
}

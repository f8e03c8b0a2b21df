package probetest

import (
	"strconv"
	"strings"
)

// PlainProbes returns requests of every shape the short path takes:
// GET and HEAD, each target and query form, HTTP/1.1 and HTTP/1.0, and
// headers that are odd but plain.
func PlainProbes() []string {
	targets := []string{
		"/healthz", "/healthz?verbose", "/healthz?",
		"/readyz", "/readyz?", "/readyz?verbose", "/readyz?verbose=1", "/readyz?x=1&verbose",
		"/readyz?verb%6Fse", "/readyz?verbosex=1&x=verbose", "/readyz?verbose#frag",
		"/readyz?a=1;verbose", "/readyz?a=1;b&verbose", "/readyz?%zz&verbose", "/readyz?verbose=%zz",
		"/readyz??verbose", "/readyz?verbose&verbose", "/readyz?+verbose", "/readyz?%20verbose",
		"/readyz?" + strings.Repeat("q", 200) + "&verbose",
	}
	headers11 := []string{
		"Host: x\r\n",
		"Host: 127.0.0.1:9101\r\nUser-Agent: kube-probe/1.31\r\nAccept: */*\r\nConnection: close\r\n",
		"host:[::1]:9101\r\nconnection: keep-alive\r\n",
		"HOST: \t node-a.example_x~%25 \t\r\nX-Empty:\r\nX-Tabs:\tv\tw\t\r\nAccept-Encoding: gzip\r\nConnection: Upgrade, close\r\n",
		"Host: x\r\nPragma: no-cache\r\nCookie: a=b\r\nTE: trailers\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\nKeep-Alive: 300\r\n",
		"Host: x\r\n" + ManyHeaders(60),
	}
	headers10 := []string{
		"",
		"Host: x\r\n",
		"User-Agent: kube-probe/1.31\r\nAccept: */*\r\n",
		"Host: x\r\n" + ManyHeaders(60),
	}
	var reqs []string
	for _, method := range []string{"GET", "HEAD"} {
		for _, target := range targets {
			for _, h := range headers11 {
				reqs = append(reqs, method+" "+target+" HTTP/1.1\r\n"+h+"\r\n")
			}
			for _, h := range headers10 {
				reqs = append(reqs, method+" "+target+" HTTP/1.0\r\n"+h+"\r\n")
			}
		}
	}
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

// OtherRequests are requests the short path answers beside the probes, as
// net/http would (SPEC v5, "One way in"), each named by what it sends. The
// ones with a body not yet whole are held after their answer, as net/http
// holds them; a test that wants their close at once shuts its sending
// side (Exchange does).
var OtherRequests = []struct{ Name, Raw string }{
	{"another path", "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"the root", "GET / HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"trailing slash", "GET /healthz/ HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"double slash", "GET //healthz HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"dot segment", "GET /./readyz HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"dot-dot segment", "HEAD /x/../readyz HTTP/1.0\r\n\r\n"},
	{"POST", "POST /healthz HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"OPTIONS", "OPTIONS /readyz HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"PUT, HTTP/1.0", "PUT /readyz HTTP/1.0\r\n\r\n"},
	{"DELETE", "DELETE /healthz HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"PATCH of another path", "PATCH /x HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"TRACE", "TRACE /readyz HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"OPTIONS *", "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"OPTIONS * with a declared body never sent", "OPTIONS * HTTP/1.1\r\nHost: x\r\nContent-Length: 4096\r\n\r\n"},
	{"OPTIONS * with its body", "OPTIONS * HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"},
	{"Content-Length: 0", "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"},
	{"Content-Length with its body", "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi"},
	{"Content-Length with part of its body", "POST /readyz HTTP/1.1\r\nHost: x\r\ncontent-length: 10\r\n\r\nhi"},
	{"Content-Length with more than its body", "GET /readyz HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhello"},
	{"a huge declared body", "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1099511627776\r\n\r\n"},
	{"a declared body, Connection: close", "GET /readyz HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\nConnection: close\r\n\r\n"},
	{"a declared body, HTTP/1.0", "POST /healthz HTTP/1.0\r\nContent-Length: 100\r\n\r\n"},
	{"chunked, whole", "GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
	{"chunked, with extensions and a trailer", "POST /readyz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n3;a=b\r\nabc\r\n0 \r\nX-T: 1\r\n\r\n"},
	{"chunked, in part", "GET /readyz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab"},
	{"chunked, malformed", "GET /readyz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"},
	{"Expect: 100-continue, no body", "GET /healthz HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n\r\n"},
	{"Expect: 100-continue, body never sent", "GET /healthz HTTP/1.1\r\nHost: x\r\nExpect: 100-Continue\r\nContent-Length: 10\r\n\r\n"},
	{"Expect: a list with 100-continue", "POST /x HTTP/1.1\r\nHost: x\r\nExpect: 100-continue, foo\r\nContent-Length: 3\r\n\r\nabc"},
	{"Expect: 100-continue after a space-separated word", "GET / HTTP/1.1\r\nHost: 0\r\nEXpeCt:0 100-Continue\r\n\r\n"},
	{"Expect: 100-continue within a word (417)", "GET /healthz HTTP/1.1\r\nHost: x\r\nExpect: x100-continue\r\n\r\n"},
	{"Expect: other (417)", "GET /readyz HTTP/1.1\r\nHost: x\r\nexpect: x\r\n\r\n"},
	{"Expect: other, a body never sent (417)", "POST /healthz HTTP/1.1\r\nHost: x\r\nExpect: foo\r\nContent-Length: 10\r\n\r\n"},
	{"a pipelined request", "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /readyz HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"bytes after the header", "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nhello"},
	{"a blank line after the header", "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n\r\n"},
}

// NetHTTPRequests are requests the short path leaves to net/http, each
// named for its reason.
var NetHTTPRequests = []struct{ Name, Raw string }{
	{"bare LF line ends", "GET /healthz HTTP/1.1\nHost: x\n\n"},
	{"a bare LF ends the header", "GET /healthz HTTP/1.1\r\nHost: x\n\r\n"},
	{"a bare LF in the request line", "GET /healthz HTTP/1.1\nHost: x\r\n\r\n"},
	{"a bare CR in a value", "GET /healthz HTTP/1.1\r\nHost: x\r\nX: a\rb\r\n\r\n"},
	{"lower-case method", "get /healthz HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"an unknown method", "BREW /healthz HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"CONNECT", "CONNECT /healthz HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"GET *", "GET * HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"two spaces", "GET  /healthz HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"trailing space", "GET /healthz HTTP/1.1 \r\nHost: x\r\n\r\n"},
	{"tab separator", "GET\t/healthz HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"tab before version", "GET /healthz\tHTTP/1.1\r\nHost: x\r\n\r\n"},
	{"absolute target", "GET http://x/healthz HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"escaped path", "GET /%68ealthz HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"fragment in the path", "GET /readyz#x HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"8-bit byte in the query", "GET /readyz?\x80verbose HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"DEL in the query", "GET /readyz?\x7fverbose HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"space in the query", "GET /readyz?a b HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"HTTP/1.2", "GET /healthz HTTP/1.2\r\nHost: x\r\n\r\n"},
	{"HTTP/2.0", "GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n"},
	{"HTTP/0.9", "GET /healthz HTTP/0.9\r\n\r\n"},
	{"lower-case version", "GET /healthz http/1.1\r\nHost: x\r\n\r\n"},
	{"leading CRLF", "\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"},
	{"no Host", "GET /healthz HTTP/1.1\r\nAccept: */*\r\n\r\n"},
	{"two Hosts", "GET /healthz HTTP/1.1\r\nHost: x\r\nHost: x\r\n\r\n"},
	{"two Hosts, HTTP/1.0", "GET /healthz HTTP/1.0\r\nHost: x\r\nhost: y\r\n\r\n"},
	{"empty Host", "GET /healthz HTTP/1.1\r\nHost: \r\n\r\n"},
	{"Host with a space", "GET /healthz HTTP/1.1\r\nHost: a b\r\n\r\n"},
	{"Host with a slash", "GET /healthz HTTP/1.1\r\nHost: a/b\r\n\r\n"},
	{"Host with a comma", "GET /healthz HTTP/1.1\r\nHost: a,b\r\n\r\n"},
	{"Host with an 8-bit byte", "GET /healthz HTTP/1.1\r\nHost: \xe9\r\n\r\n"},
	{"space before the colon", "GET /healthz HTTP/1.1\r\nHost : x\r\n\r\n"},
	{"tab before the colon", "GET /healthz HTTP/1.1\r\nHost\t: x\r\n\r\n"},
	{"empty name", "GET /healthz HTTP/1.1\r\nHost: x\r\n: v\r\n\r\n"},
	{"no colon", "GET /healthz HTTP/1.1\r\nHost: x\r\nX\r\n\r\n"},
	{"name with a slash", "GET /healthz HTTP/1.1\r\nHost: x\r\nX/Y: v\r\n\r\n"},
	{"NUL in a name", "GET /healthz HTTP/1.1\r\nHost: x\r\nX\x00: v\r\n\r\n"},
	{"NUL in a value", "GET /healthz HTTP/1.1\r\nHost: x\r\nX: a\x00b\r\n\r\n"},
	{"8-bit byte in a value", "GET /healthz HTTP/1.1\r\nHost: x\r\nX: caf\xc3\xa9\r\n\r\n"},
	{"obs-fold", "GET /healthz HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n"},
	{"obs-fold of Host", "GET /healthz HTTP/1.1\r\nHost: x\r\n\ty\r\n\r\n"},
	{"first line folded", "GET /healthz HTTP/1.1\r\n Host: x\r\n\r\n"},
	{"Content-Length: 0 twice", "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\ncontent-length: 0\r\n\r\n"},
	{"two Content-Lengths", "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"},
	{"a signed Content-Length", "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: +1\r\n\r\na"},
	{"a Content-Length of 19 digits", "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000000000000\r\n\r\n"},
	{"Transfer-Encoding and Content-Length", "GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n"},
	{"Transfer-Encoding: identity", "GET /healthz HTTP/1.1\r\nHost: x\r\nTRANSFER-ENCODING: identity\r\n\r\n"},
	{"Transfer-Encoding: gzip, chunked", "GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"},
	{"Transfer-Encoding, HTTP/1.0", "GET /healthz HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
	{"Trailer", "GET /healthz HTTP/1.1\r\nHost: x\r\nTrailer: X\r\n\r\n"},
	{"Expect, HTTP/1.0", "GET /readyz HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nx"},
	{"Expect: other, HTTP/1.0", "HEAD /healthz HTTP/1.0\r\nExpect: foo\r\n\r\n"},
	{"two Expect headers", "GET /readyz HTTP/1.1\r\nHost: x\r\nExpect: foo\r\nExpect: 100-continue\r\n\r\n"},
	{"an empty Expect", "GET /readyz HTTP/1.1\r\nHost: x\r\nExpect:\r\n\r\n"},
	{"Upgrade", "GET /healthz HTTP/1.1\r\nHost: x\r\nUpgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n"},
	{"websocket", "GET /readyz HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"},
	{"two Connection headers", "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\nConnection: keep-alive\r\n\r\n"},
	{"HTTP/1.0 keep-alive", "GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"},
	{"HTTP/1.0 keep-alive on HEAD", "HEAD /readyz HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"},
	{"HTTP/1.0 close", "GET /healthz HTTP/1.0\r\nConnection: close\r\n\r\n"},
	{"PRI", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"},
}

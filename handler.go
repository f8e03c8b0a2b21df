package health

import (
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/meshnode/health/internal/listener"
)

// The only bodies the handler writes. They are fixed bytes, never formatted,
// so that nothing from the process's state can reach an unauthenticated
// client.
const (
	bodyOK               = "ok\n"
	bodyNotFound         = "404 page not found\n"
	bodyMethodNotAllowed = "Method Not Allowed\n"
)

// The headers every response carries. They are shared, immutable slices
// assigned straight into the response's header map, which is what keeps a
// probe free of allocations; each has len == cap, so a middleware's append
// copies rather than writing into them.
var (
	headerContentType = []string{"text/plain; charset=utf-8"}
	headerNoSniff     = []string{"nosniff"}
	headerNoStore     = []string{"no-store"}
	headerAllow       = []string{"GET, HEAD"}
)

// response is one of the handler's fixed answers, built once: for the
// handler, and as Serve's listener writes it (wire).
type response struct {
	status        int
	body          []byte
	contentLength []string
	wire          listener.Response
}

// newResponse builds the answer of status with body. The header lines of
// wire are the ones ServeHTTP sets, in the order net/http writes them
// (sorted by name): a change to one is a change to the other, and
// TestServeAnswersProbesAsNetHTTP fails until both are made.
func newResponse(status int, body string) response {
	length := strconv.Itoa(len(body))
	var header []byte
	if status == http.StatusMethodNotAllowed {
		header = append(header, "Allow: "+headerAllow[0]+"\r\n"...)
	}
	header = append(header, "Cache-Control: "+headerNoStore[0]+"\r\n"+
		"Content-Length: "+length+"\r\n"+
		"Content-Type: "+headerContentType[0]+"\r\n"+
		"X-Content-Type-Options: "+headerNoSniff[0]+"\r\n"...)
	return response{
		status:        status,
		body:          []byte(body),
		contentLength: []string{length},
		wire:          listener.Response{Status: status, Header: header, Body: []byte(body)},
	}
}

var (
	responseOK               = newResponse(http.StatusOK, bodyOK)
	responseNotFound         = newResponse(http.StatusNotFound, bodyNotFound)
	responseMethodNotAllowed = newResponse(http.StatusMethodNotAllowed, bodyMethodNotAllowed)
	responseReadiness        = readinessResponses()
)

// readinessResponses builds the /readyz answer of each reason; the body of a
// failing reason is "not ready: " and its sentinel's text.
func readinessResponses() [reasonReady + 1]response {
	var rs [reasonReady + 1]response
	for r, c := range conditions {
		rs[r] = newResponse(http.StatusServiceUnavailable, "not ready: "+c.err.Error()+"\n")
	}
	rs[reasonReady] = responseOK
	return rs
}

// Handler returns the probe handler: GET or HEAD of /healthz, /readyz and
// /readyz/<check>, 405 for another method, 404 for any other path (exact,
// never a redirect). On /readyz the query keys "verbose" and "exclude" act
// as the Kubernetes API server's; /readyz/<check> ignores the query. It
// takes no lock, logs nothing and allocates nothing.
func (s *Server) Handler() http.Handler { return probeHandler{s} }

type probeHandler struct{ s *Server }

func (h probeHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	if r.URL.RawPath != "" {
		path = "" // escaped: no path of ours
	}
	resp, counter := h.s.route(r.Method, path, r.URL.RawQuery)
	counter.Add(1)
	// newResponse writes these headers for Serve's listener too.
	header := w.Header()
	header["Content-Type"] = headerContentType
	header["X-Content-Type-Options"] = headerNoSniff
	header["Cache-Control"] = headerNoStore
	header["Content-Length"] = resp.contentLength
	if resp.status == http.StatusMethodNotAllowed {
		header["Allow"] = headerAllow
	}
	w.WriteHeader(resp.status)
	if r.Method != http.MethodHead {
		// A failed write means the client went away; there is no one
		// left to tell, and logging it would let any client fill the log.
		_, _ = w.Write(resp.body)
	}
}

// route picks the answer to a request for path and the counter that
// counts it. The handler gives path unescaped, and none if it had an
// escape; the listener gives it as the request spelled it: either way a
// path with an escape is none of ours. The handler and Serve's listener (answer) both route
// through it, so that they cannot disagree.
func (s *Server) route(method, path, rawQuery string) (*response, *atomic.Uint64) {
	resp, counter := s.routePath(path, rawQuery)
	if resp != &responseNotFound && method != http.MethodGet && method != http.MethodHead {
		resp, counter = &responseMethodNotAllowed, &s.probes.other
	}
	return resp, counter
}

// routePath is route for a GET.
func (s *Server) routePath(path, rawQuery string) (*response, *atomic.Uint64) {
	var resp *response
	switch {
	case path == "/healthz":
		return &responseOK, &s.probes.liveness
	case path == "/readyz":
		v := s.verdict.Load()
		q := parseReadyzQuery(rawQuery)
		resp = &responseReadiness[(v.unmet &^ q.excluded.rows()).first()]
		if q.verbose {
			resp = &v.verbose[q.excluded][boolIndex(q.unknown)]
		}
	default:
		i := checkIndex(path)
		if i < 0 {
			return &responseNotFound, &s.probes.other
		}
		resp = &responseReadiness[(s.verdict.Load().unmet & checks[i].rows).first()]
	}
	if resp.status == http.StatusOK {
		return resp, &s.probes.readyOK
	}
	return resp, &s.probes.readyNotReady
}

func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}

// checkIndex returns the index in checks of the check whose path,
// "/readyz/" and its name, is exactly path, or -1.
func checkIndex(path string) int {
	name, ok := strings.CutPrefix(path, "/readyz/")
	if !ok {
		return -1
	}
	for i, c := range checks {
		if c.name == name {
			return i
		}
	}
	return -1
}

// answer is route for Serve's listener, which hands it the request's
// method, path and query and writes the answer as it is built here
// (response.wire); it counts the answer as the handler does.
func (s *Server) answer(method, path, rawQuery string) *listener.Response {
	resp, counter := s.route(method, path, rawQuery)
	counter.Add(1)
	return &resp.wire
}

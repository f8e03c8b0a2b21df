package health

import (
	"bufio"
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestHandlerResponses(t *testing.T) {
	s, _ := newTestServer(t) // not ready: registration pending
	tests := []struct {
		method, target string
		status         int
		body           string
	}{
		{"GET", "/healthz", 200, "ok\n"},
		{"HEAD", "/healthz", 200, ""},
		{"GET", "/readyz", 503, "not ready: registration pending\n"},
		{"HEAD", "/readyz", 503, ""},
		{"GET", "/healthz?verbose=1&exclude=x", 200, "ok\n"},
		{"GET", "/readyz?verbose", 503, "[-]registration failed: registration pending\n[-]data-plane failed: data plane not configured\n[+]event-delivery ok\n[+]subsystems ok\nreadyz check failed\n"},
		{"HEAD", "/readyz?verbose", 503, ""},
		{"GET", "/readyz?verbosex", 503, "not ready: registration pending\n"},
		{"POST", "/readyz?verbose", 405, "Method Not Allowed\n"},
		{"GET", "/nothing?verbose", 404, "404 page not found\n"},
		{"POST", "/healthz", 405, "Method Not Allowed\n"},
		{"PUT", "/readyz", 405, "Method Not Allowed\n"},
		{"DELETE", "/readyz", 405, "Method Not Allowed\n"},
		{"OPTIONS", "/healthz", 405, "Method Not Allowed\n"},
		{"get", "/healthz", 405, "Method Not Allowed\n"},
		{"GET", "/", 404, "404 page not found\n"},
		{"GET", "/healthz/", 404, "404 page not found\n"},
		{"GET", "//healthz", 404, "404 page not found\n"},
		{"GET", "/./healthz", 404, "404 page not found\n"},
		{"GET", "/x/../healthz", 404, "404 page not found\n"},
		{"GET", "/%68ealthz", 404, "404 page not found\n"},
		{"GET", "/HEALTHZ", 404, "404 page not found\n"},
		{"GET", "/readyz/x", 404, "404 page not found\n"},
		{"POST", "/nothing", 404, "404 page not found\n"},
		{"HEAD", "/nothing", 404, ""},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.target, func(t *testing.T) {
			rec := serve(s.Handler(), tc.method, tc.target)
			assert.Equal(t, tc.status, rec.Code)
			assert.Equal(t, tc.body, rec.Body.String())
			h := rec.Result().Header
			assert.Equal(t, "text/plain; charset=utf-8", h.Get("Content-Type"))
			assert.Equal(t, "nosniff", h.Get("X-Content-Type-Options"))
			assert.Equal(t, "no-store", h.Get("Cache-Control"))
			assert.Empty(t, h.Get("Location"), "never a redirect")
			if tc.status == 405 {
				assert.Equal(t, "GET, HEAD", h.Get("Allow"))
			} else {
				assert.Empty(t, h.Get("Allow"))
			}
			get := serve(s.Handler(), http.MethodGet, tc.target)
			if tc.status != 405 {
				assert.Equal(t, strconv.Itoa(get.Body.Len()), h.Get("Content-Length"), "HEAD announces the length GET sends")
			}
		})
	}
}

// TestLivenessIsOKInEveryState checks that /healthz is 200 ok whatever
// readiness says: a liveness failure restarts the agent, and the restart
// runs its drain path.
func TestLivenessIsOKInEveryState(t *testing.T) {
	for _, tc := range serverStates {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newTestServer(t)
			tc.set(s)
			for _, method := range []string{http.MethodGet, http.MethodHead} {
				rec := serve(s.Handler(), method, "/healthz")
				assert.Equal(t, 200, rec.Code, method)
				if method == http.MethodGet {
					assert.Equal(t, "ok\n", rec.Body.String())
				}
			}
		})
	}
}

// FuzzHandler parses arbitrary request bytes with net/http's own parser and
// checks that every answer, in every state of serverStates, is one of the
// constants, with none of the strings planted in the server's state
// anywhere in the response, and that the handler reads the query's
// verbose and excludes exactly as url.ParseQuery does.
func FuzzHandler(f *testing.F) {
	f.Add("GET", "/readyz", "", "Accept", "*/*")
	f.Add("HEAD", "/healthz", "verbose=1", "X-Forwarded-For", "10.0.0.1")
	f.Add("POST", "//healthz", "a=%00", "Content-Length", "5")
	f.Add("GET", "/%72eadyz", "", "Connection", "close")
	f.Add("OPTIONS", "*", "", "Expect", "100-continue")
	f.Add("GET", "http://node/readyz", "", "Host", "node")
	f.Add("GET", "/readyz", "verbose", "Accept", "*/*")
	f.Add("HEAD", "/readyz", "x=1&verb%6Fse=", "Accept", "*/*")
	f.Add("GET", "/readyz", "x;verbose&verbose=%zz", "Accept", "*/*")
	f.Add("GET", "/readyz", "exclude=registration&verbose&exclude=nope", "Accept", "*/*")
	f.Add("GET", "/readyz", "exclude=data%2Dplane&exclude=subsystems", "Accept", "*/*")
	f.Add("HEAD", "/readyz/event-delivery", "verbose", "Accept", "*/*")
	f.Add("GET", "/readyz/data-plane-check/", "", "Accept", "*/*")

	var handlers []http.Handler
	for _, st := range serverStates {
		s := NewServer(Config{}, discardLogger())
		st.set(s)
		handlers = append(handlers, s.Handler())
	}

	f.Fuzz(func(t *testing.T, method, path, query, name, value string) {
		target := path
		if query != "" {
			target += "?" + query
		}
		raw := method + " " + target + " HTTP/1.1\r\nHost: node\r\n" + name + ": " + value + "\r\n\r\n"
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
		if err != nil {
			return // net/http answers it with its own 4xx; the handler never sees it
		}
		values, _ := url.ParseQuery(req.URL.RawQuery)
		// url.ParseQuery gives up beyond 10 000 parameters, which no
		// request within Serve's header cap reaches.
		if strings.Count(req.URL.RawQuery, "&") < 10000 {
			if got, want := parseReadyzQuery(req.URL.RawQuery), readyzQueryOf(values); got != want {
				t.Fatalf("%q: parseReadyzQuery says %+v, url.ParseQuery %+v", req.URL.RawQuery, got, want)
			}
		}
		for _, h := range handlers {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			body := rec.Body.String()
			if !isAllowedBody(req.Method, body) {
				t.Fatalf("%q: body %q is not a constant", raw, body)
			}
			if req.Method != http.MethodHead && rec.Code != 404 && rec.Code != 405 &&
				verboseBodies[body] != (req.URL.Path == "/readyz" && values.Has("verbose")) {
				t.Fatalf("%q: verbose %v, body %q", raw, values.Has("verbose"), body)
			}
			switch rec.Code {
			case 200, 404, 405, 503:
			default:
				t.Fatalf("%q: status %d", raw, rec.Code)
			}
			var dump bytes.Buffer
			_ = rec.Result().Header.Write(&dump)
			dump.WriteString(body)
			for _, planted := range []string{"PLANTED", "wg0", "10.0.0.1", "node-a"} {
				if strings.Contains(dump.String(), planted) {
					t.Fatalf("%q: response carries %q:\n%s", raw, planted, dump.String())
				}
			}
		}
	})
}

package health

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestVerboseBodies checks the exact verbose body of each state of
// serverStates, and that status and headers are those of plain /readyz,
// for GET and HEAD.
func TestVerboseBodies(t *testing.T) {
	for _, tc := range serverStates {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newTestServer(t)
			tc.set(s)
			plain := serve(s.Handler(), http.MethodGet, "/readyz")
			rec := serve(s.Handler(), http.MethodGet, "/readyz?verbose")
			assert.Equal(t, tc.status, rec.Code)
			assert.Equal(t, plain.Code, rec.Code, "the status of plain /readyz")
			assert.Equal(t, tc.verbose, rec.Body.String())
			for _, planted := range []string{"PLANTED", "wg0", "10.0.0.1", "node-a"} {
				assert.NotContains(t, rec.Body.String(), planted)
			}

			h := rec.Result().Header
			assert.Equal(t, strconv.Itoa(len(tc.verbose)), h.Get("Content-Length"))
			plainHeader := plain.Result().Header
			for _, name := range []string{"Content-Type", "X-Content-Type-Options", "Cache-Control"} {
				assert.Equal(t, plainHeader.Values(name), h.Values(name), name)
			}

			head := serve(s.Handler(), http.MethodHead, "/readyz?verbose")
			assert.Equal(t, tc.status, head.Code)
			assert.Empty(t, head.Body.String(), "HEAD gets no body")
			assert.Equal(t, strconv.Itoa(len(tc.verbose)), head.Result().Header.Get("Content-Length"))

			assert.Equal(t, "ok\n", serve(s.Handler(), http.MethodGet, "/healthz?verbose").Body.String(), "/healthz ignores the query")
		})
	}
}

// TestVerboseFollowsReadiness checks that the verbose answer changes with
// the verdict, including a change that leaves the plain answer as it was.
func TestVerboseFollowsReadiness(t *testing.T) {
	s, _ := newTestServer(t)
	s.SetRegistered()
	s.SetDataPlaneReady()
	s.SetDeliveryStopped()
	before := serve(s.Handler(), http.MethodGet, "/readyz?verbose").Body.String()
	s.SetSubsystemStopped(plantedSubsystem) // /readyz still says delivery stopped
	assert.Equal(t, "not ready: event delivery stopped\n", serve(s.Handler(), http.MethodGet, "/readyz").Body.String())
	after := serve(s.Handler(), http.MethodGet, "/readyz?verbose").Body.String()
	assert.NotEqual(t, before, after)
	assert.Contains(t, after, "[-]subsystems failed: subsystem stopped\n")

	setCheckVerdict(s, checkVerdict{})
	assert.Contains(t, serve(s.Handler(), http.MethodGet, "/readyz?verbose").Body.String(), "[+]data-plane-check ok\n", "a check set: its line")
	s.SetDataPlaneCheck(t.Context(), nil)
	assert.Equal(t, "[+]registration ok\n[+]data-plane ok\n[-]event-delivery failed: event delivery stopped\n[-]subsystems failed: subsystem stopped\nreadyz check failed\n",
		serve(s.Handler(), http.MethodGet, "/readyz?verbose").Body.String(), "the check removed: no line")
}

// TestVerboseQueries checks which queries ask for the verbose answer: the
// key verbose as url.ParseQuery reads it, on /readyz only.
func TestVerboseQueries(t *testing.T) {
	s, _ := newTestServer(t)
	s.SetRegistered()
	s.SetDataPlaneReady()
	const verboseBody = "[+]registration ok\n[+]data-plane ok\n[+]event-delivery ok\n[+]subsystems ok\nreadyz check passed\n"
	tests := []struct {
		query   string
		verbose bool
	}{
		{"verbose", true},
		{"verbose=1", true},
		{"verbose=", true},
		{"verbose=false", true}, // the key counts, as in Kubernetes
		{"x=1&verbose", true},
		{"verbose&x=1", true},
		{"&&verbose&&", true},
		{"verbose&verbose", true},
		{"verb%6Fse", true},
		{"%76%65%72%62%6f%73%65=1", true},
		{"x=1;y=2&verbose", true}, // the pair with ';' is skipped, not the query
		{"", false},
		{"verbosex", false},
		{"xverbose", false},
		{"x=verbose", false},
		{"Verbose", false},
		{"VERBOSE", false},
		{"verbose+", false}, // "verbose "
		{"verbose%20", false},
		{"verbose;x=1", false},
		{"x=1;verbose", false},
		{"verbose=1;x", false},
		{"verbose=%zz", false}, // a malformed value drops the pair
		{"verbose=%4", false},
		{"verb%zzse", false},
		{"verbose%", false},
		{"verbos", false},
		{"=verbose", false},
	}
	for _, tc := range tests {
		t.Run("?"+tc.query, func(t *testing.T) {
			values, _ := url.ParseQuery(tc.query)
			require.Equal(t, tc.verbose, values.Has("verbose"), "the table agrees with url.ParseQuery")
			assert.Equal(t, tc.verbose, hasQueryKey(tc.query, "verbose"))
			body := serve(s.Handler(), http.MethodGet, "/readyz?"+tc.query).Body.String()
			if tc.verbose {
				assert.Equal(t, verboseBody, body)
			} else {
				assert.Equal(t, "ok\n", body)
			}
		})
	}
}

// TestUnescapesTo covers what the query table cannot reach: escapes of
// every case and a key longer or shorter than the one wanted.
func TestUnescapesTo(t *testing.T) {
	tests := []struct {
		s, want string
		ok      bool
	}{
		{"a%2Fb", "a/b", true},
		{"a%2fb", "a/b", true},
		{"a+b", "a b", true},
		{"%41%4a%4A", "AJJ", true},
		{"", "", true},
		{"ab", "abc", false},
		{"abcd", "abc", false},
		{"%", "", false},
		{"%4", "", false},
		{"%g1", "", false},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.ok, unescapesTo(tc.s, tc.want), "%q %q", tc.s, tc.want)
		if tc.ok {
			got, err := url.QueryUnescape(tc.s)
			require.NoError(t, err)
			require.Equal(t, tc.want, got, "the table agrees with url.QueryUnescape")
		}
	}
}

// verboseBodies are every verbose body the handler may write, built here
// from literal lines rather than from the package's tables, so that the
// fuzzer checks the package against an independent list.
var verboseBodies = func() map[string]bool {
	options := [][]string{
		{"[+]registration ok\n", "[-]registration failed: registration pending\n"},
		{"[+]data-plane ok\n", "[-]data-plane failed: data plane not configured\n"},
		{"", "[+]data-plane-check ok\n", "[-]data-plane-check failed: data plane check pending\n",
			"[-]data-plane-check failed: data plane lost\n", "[-]data-plane-check failed: data plane check stalled\n"},
		{"[+]event-delivery ok\n", "[-]event-delivery failed: event delivery stopped\n", "[-]event-delivery failed: event delivery degraded\n"},
		{"[+]subsystems ok\n", "[-]subsystems failed: subsystem stopped\n", "[-]subsystems failed: subsystem unresponsive\n"},
	}
	bodies := map[string]bool{}
	var walk func(prefix string, failed bool, rest [][]string)
	walk = func(prefix string, failed bool, rest [][]string) {
		if len(rest) == 0 {
			if failed {
				bodies[prefix+"readyz check failed\n"] = true
			} else {
				bodies[prefix+"readyz check passed\n"] = true
			}
			return
		}
		for _, line := range rest[0] {
			walk(prefix+line, failed || strings.HasPrefix(line, "[-]"), rest[1:])
		}
	}
	walk("", false, options)
	return bodies
}()

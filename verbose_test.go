package health

import (
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

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
			assert.Equal(t, tc.verbose, parseReadyzQuery(tc.query).verbose)
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
		{"[+]registration ok\n", "[-]registration failed: registration pending\n", "[+]registration excluded: ok\n"},
		{"[+]data-plane ok\n", "[-]data-plane failed: data plane not configured\n", "[+]data-plane excluded: ok\n"},
		{"", "[+]data-plane-check ok\n", "[-]data-plane-check failed: data plane check pending\n",
			"[-]data-plane-check failed: data plane lost\n", "[-]data-plane-check failed: data plane check stalled\n",
			"[+]data-plane-check excluded: ok\n"},
		{"[+]event-delivery ok\n", "[-]event-delivery failed: event delivery stopped\n", "[-]event-delivery failed: event delivery degraded\n",
			"[+]event-delivery excluded: ok\n"},
		{"[+]subsystems ok\n", "[-]subsystems failed: subsystem stopped\n", "[-]subsystems failed: subsystem unresponsive\n",
			"[+]subsystems excluded: ok\n"},
		{"", "warn: some health checks cannot be excluded\n"},
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

// readyzQueryOf is what url.ParseQuery's values ask of /readyz: the
// reference that parseReadyzQuery must agree with.
func readyzQueryOf(values url.Values) readyzQuery {
	q := readyzQuery{verbose: values.Has("verbose")}
	for _, name := range values["exclude"] {
		i := slices.IndexFunc(checks, func(c check) bool { return c.name == name })
		if i < 0 {
			q.unknown = true
		} else {
			q.excluded |= 1 << i
		}
	}
	return q
}

// checkRows are the rows of each check, written out here rather than
// taken from the package's table, so that the tests below check the
// table against an independent list.
var checkRows = []struct {
	name string
	rows []error
}{
	{"registration", []error{ErrRegistrationPending}},
	{"data-plane", []error{ErrDataPlanePending}},
	{"data-plane-check", []error{ErrDataPlaneCheckPending, ErrDataPlaneLost, ErrDataPlaneStalled}},
	{"event-delivery", []error{ErrDeliveryStopped, ErrDeliveryDegraded}},
	{"subsystems", []error{ErrSubsystemStopped, ErrSubsystemUnresponsive}},
}

// firstUnmet returns the first of unmet, in table order, that is none of
// skip's rows and, unless only is nil, one of only's: the row whose body
// the answer carries, or nil for 200.
func firstUnmet(unmet []error, skip, only []error) error {
	for _, err := range unmet {
		if !slices.Contains(skip, err) && (only == nil || slices.Contains(only, err)) {
			return err
		}
	}
	return nil
}

// expectAnswer checks a readiness answer of the handler against the row
// it should carry (nil: 200 ok), with /readyz's headers, for GET and HEAD.
func expectAnswer(t *testing.T, h http.Handler, target string, row error) {
	t.Helper()
	status, body := http.StatusOK, "ok\n"
	if row != nil {
		status, body = http.StatusServiceUnavailable, "not ready: "+row.Error()+"\n"
	}
	get := serve(h, http.MethodGet, target)
	assert.Equal(t, status, get.Code, target)
	assert.Equal(t, body, get.Body.String(), target)
	assert.Equal(t, http.Header{
		"Content-Type":           {"text/plain; charset=utf-8"},
		"X-Content-Type-Options": {"nosniff"},
		"Cache-Control":          {"no-store"},
		"Content-Length":         {strconv.Itoa(len(body))},
	}, get.Result().Header, target)
	head := serve(h, http.MethodHead, target)
	assert.Equal(t, status, head.Code, target)
	assert.Empty(t, head.Body.String(), target)
	assert.Equal(t, strconv.Itoa(len(body)), head.Result().Header.Get("Content-Length"), target)
}

// TestReadyzCheck checks /readyz/<check> in every state of serverStates:
// the first unmet row of that check alone, whatever else is unmet; 405
// for another method; and 404 for any other name, a trailing slash or an
// empty name. The query is ignored.
func TestReadyzCheck(t *testing.T) {
	for _, tc := range serverStates {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newTestServer(t)
			tc.set(s)
			before := s.Status().Probes
			for _, c := range checkRows {
				expectAnswer(t, s.Handler(), "/readyz/"+c.name, firstUnmet(tc.unmet, nil, c.rows))
				expectAnswer(t, s.Handler(), "/readyz/"+c.name+"?verbose&exclude="+c.name, firstUnmet(tc.unmet, nil, c.rows))
				post := serve(s.Handler(), http.MethodPost, "/readyz/"+c.name)
				assert.Equal(t, http.StatusMethodNotAllowed, post.Code)
				assert.Equal(t, "GET, HEAD", post.Result().Header.Get("Allow"))
				assert.Equal(t, "Method Not Allowed\n", post.Body.String())
			}
			for _, target := range []string{"/readyz/", "/readyz/nope", "/readyz/data-plane/", "/readyz//data-plane",
				"/readyz/Data-Plane", "/readyz/data-plane-check/x", "/readyz/./subsystems", "/healthz/registration"} {
				rec := serve(s.Handler(), http.MethodGet, target)
				assert.Equal(t, http.StatusNotFound, rec.Code, target)
				assert.Equal(t, "404 page not found\n", rec.Body.String(), target)
			}
			after := s.Status().Probes
			ok, notReady := 0, 0
			for _, c := range checkRows {
				if firstUnmet(tc.unmet, nil, c.rows) == nil {
					ok += 4 // GET and HEAD, twice
				} else {
					notReady += 4
				}
			}
			assert.Equal(t, ProbeCounts{
				ReadyOK:       before.ReadyOK + uint64(ok),
				ReadyNotReady: before.ReadyNotReady + uint64(notReady),
				Other:         before.Other + uint64(len(checkRows)+8),
			}, after, "readiness answers count as /readyz's")
		})
	}
}

// TestReadyzExclude checks /readyz?exclude= in every state of
// serverStates, for every set of excluded checks, with and without a name
// that is no check, plain and verbose. The verbose body is the state's
// own, each excluded check's line (when shown) read as excluded, the
// warning before the summary when a name is no check, and the summary of
// what is left.
func TestReadyzExclude(t *testing.T) {
	for _, tc := range serverStates {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newTestServer(t)
			tc.set(s)
			for set := range 1 << len(checkRows) {
				for _, unknown := range []bool{false, true} {
					var query []string
					var skip []error
					verbose := tc.verbose
					for i, c := range checkRows {
						if set&(1<<i) == 0 {
							continue
						}
						query = append(query, "exclude="+c.name)
						skip = append(skip, c.rows...)
						verbose = regexp.MustCompile(`(?m)^\[[-+]\]`+c.name+` .*$`).
							ReplaceAllString(verbose, "[+]"+c.name+" excluded: ok")
					}
					if unknown {
						query = append(query, "exclude=PLANTED")
					}
					target := "/readyz?" + strings.Join(query, "&")
					row := firstUnmet(tc.unmet, skip, nil)
					expectAnswer(t, s.Handler(), target, row)

					verbose = strings.TrimSuffix(strings.TrimSuffix(verbose, "readyz check failed\n"), "readyz check passed\n")
					if unknown {
						verbose += "warn: some health checks cannot be excluded\n"
					}
					status := http.StatusOK
					if row == nil {
						verbose += "readyz check passed\n"
					} else {
						status = http.StatusServiceUnavailable
						verbose += "readyz check failed\n"
					}
					rec := serve(s.Handler(), http.MethodGet, target+"&verbose")
					assert.Equal(t, status, rec.Code, target)
					assert.Equal(t, verbose, rec.Body.String(), target)
					assert.Equal(t, strconv.Itoa(len(verbose)), rec.Result().Header.Get("Content-Length"), target)
				}
			}
		})
	}
}

// TestReadyzExcludeExamples are the contract's cases, written out whole: the
// node signal's URL through a control-plane outage, a name that is no
// check (never echoed), an escaped name, a repeated one, and the
// data-plane check's line, absent while no check is set.
func TestReadyzExcludeExamples(t *testing.T) {
	outage := func(s *Server) { // data plane up, control plane gone
		s.SetDataPlaneReady()
		setCheckVerdict(s, checkVerdict{})
		s.SetDeliveryMode(DeliveryModeDegradedPolling)
		s.Watch("reconcile", time.Hour)
	}
	tests := []struct {
		name   string
		set    func(*Server)
		target string
		status int
		body   string
	}{
		{"node signal through an outage", outage, "/readyz?exclude=registration&exclude=event-delivery&exclude=subsystems",
			200, "ok\n"},
		{"node signal, verbose", outage, "/readyz?exclude=registration&exclude=event-delivery&exclude=subsystems&verbose",
			200, "[+]registration excluded: ok\n[+]data-plane ok\n[+]data-plane-check ok\n[+]event-delivery excluded: ok\n[+]subsystems excluded: ok\nreadyz check passed\n"},
		{"node signal, data plane lost", func(s *Server) { outage(s); setCheckVerdict(s, checkVerdict{err: errPlantedCheck}) },
			"/readyz?exclude=registration&exclude=event-delivery&exclude=subsystems", 503, "not ready: data plane lost\n"},
		{"plain /readyz through the outage", outage, "/readyz", 503, "not ready: registration pending\n"},
		{"a name that is no check", outage, "/readyz?verbose&exclude=PLANTED%0Anode-a&exclude=registration",
			503, "[+]registration excluded: ok\n[+]data-plane ok\n[+]data-plane-check ok\n[-]event-delivery failed: event delivery degraded\n[-]subsystems failed: subsystem unresponsive\nwarn: some health checks cannot be excluded\nreadyz check failed\n"},
		{"an empty name is no check", setLatches, "/readyz?exclude&verbose",
			200, "[+]registration ok\n[+]data-plane ok\n[+]event-delivery ok\n[+]subsystems ok\nwarn: some health checks cannot be excluded\nreadyz check passed\n"},
		{"escaped and repeated", func(*Server) {}, "/readyz?exclude=registration&exclude=data%2Dplane&exclude=registration&verbose",
			200, "[+]registration excluded: ok\n[+]data-plane excluded: ok\n[+]event-delivery ok\n[+]subsystems ok\nreadyz check passed\n"},
		{"no check set: its exclusion is no mistake", setLatches, "/readyz?exclude=data-plane-check&verbose",
			200, "[+]registration ok\n[+]data-plane ok\n[+]event-delivery ok\n[+]subsystems ok\nreadyz check passed\n"},
		{"no check set: its check is met", func(*Server) {}, "/readyz/data-plane-check", 200, "ok\n"},
		{"a malformed escape drops the pair", func(*Server) {}, "/readyz?exclude=registration%zz", 503, "not ready: registration pending\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newTestServer(t)
			tc.set(s)
			rec := serve(s.Handler(), http.MethodGet, tc.target)
			assert.Equal(t, tc.status, rec.Code)
			assert.Equal(t, tc.body, rec.Body.String())
		})
	}
}

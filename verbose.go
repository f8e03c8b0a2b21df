package health

import (
	"net/http"
	"strings"
)

// verboseLines are the lines of the /readyz?verbose body, in the order of
// the readiness table, named as the Kubernetes API server names its checks
// so that an operator reads it as the ?verbose they already know. Each line
// covers the rows from first to last; a failed line gives the text of the
// first unmet one.
var verboseLines = [...]struct {
	name        string
	first, last reason
	onlyOnCheck bool // shown only while a data-plane check is set
}{
	{"registration", reasonRegistrationPending, reasonRegistrationPending, false},
	{"data-plane", reasonDataPlanePending, reasonDataPlanePending, false},
	{"data-plane-check", reasonDataPlaneCheckPending, reasonDataPlaneStalled, true},
	{"event-delivery", reasonDeliveryStopped, reasonDeliveryDegraded, false},
	{"subsystems", reasonSubsystemStopped, reasonSubsystemUnresponsive, false},
}

// verboseResponse builds the /readyz?verbose answer for a set of unmet
// conditions. It is called when the verdict changes, never by a probe. Its
// words are the line names above and the sentinels' texts, fixed when the
// package is initialised: no name, error or time of the process's state
// can reach the body.
func verboseResponse(unmet reasonSet, checkSet bool) response {
	var b strings.Builder
	for _, line := range verboseLines {
		if line.onlyOnCheck && !checkSet {
			continue
		}
		if r := unmet.within(line.first, line.last).first(); r != reasonReady {
			b.WriteString("[-]" + line.name + " failed: " + reasons[r].Error() + "\n")
		} else {
			b.WriteString("[+]" + line.name + " ok\n")
		}
	}
	if unmet != 0 {
		b.WriteString("readyz check failed\n")
		return newResponse(http.StatusServiceUnavailable, b.String())
	}
	b.WriteString("readyz check passed\n")
	return newResponse(http.StatusOK, b.String())
}

// hasQueryKey reports whether the raw query holds key, exactly as
// url.ParseQuery would see it, without allocating: the query is split on
// '&' alone; a pair holding a ';' is skipped, as is a pair whose key or
// value has a malformed percent escape; the key is compared once
// unescaped, so "verb%6Fse" is "verbose" and '+' is a space. A key with or
// without a value counts. The one difference is url's cap on the number of
// parameters (10 000 by default), which a request within Serve's 4 KiB
// cap cannot reach.
//
// Agreeing with url.ParseQuery means that a handler wrapped around this
// one, or a proxy in front of it, that reads the query with the standard
// library sees the same verbose as this handler does.
func hasQueryKey(rawQuery, key string) bool {
	for rawQuery != "" {
		var pair string
		pair, rawQuery, _ = strings.Cut(rawQuery, "&")
		if strings.Contains(pair, ";") {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		if unescapesTo(k, key) && validEscapes(v) {
			return true
		}
	}
	return false
}

// unescapesTo reports whether the query component s is want once
// unescaped, with every escape it holds well formed.
func unescapesTo(s, want string) bool {
	n := 0 // bytes of want matched
	for i := 0; i < len(s); n++ {
		c, width := unescapeAt(s, i)
		if width == 0 || n >= len(want) || c != want[n] {
			return false
		}
		i += width
	}
	return n == len(want)
}

// validEscapes reports whether every escape in the query component s is
// well formed, as url.QueryUnescape requires.
func validEscapes(s string) bool {
	for i := 0; i < len(s); {
		_, width := unescapeAt(s, i)
		if width == 0 {
			return false
		}
		i += width
	}
	return true
}

// unescapeAt returns the byte that s[i:] starts with once unescaped as
// url.QueryUnescape does ('+' is a space, "%XX" the byte XX) and how many
// bytes of s it takes: 0 for a malformed escape.
func unescapeAt(s string, i int) (byte, int) {
	switch s[i] {
	case '%':
		if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
			return 0, 0
		}
		return unhex(s[i+1])<<4 | unhex(s[i+2]), 3
	case '+':
		return ' ', 1
	}
	return s[i], 1
}

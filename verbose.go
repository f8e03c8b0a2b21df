package health

import (
	"net/http"
	"strings"
)

// check is a group of consecutive rows of the readiness table that share a
// name: a line of the /readyz?verbose body, /readyz/<name>, and what
// ?exclude=<name> leaves out. A failed check gives the text of its first
// unmet row.
type check struct {
	name           string
	rows           reasonSet
	whileInstalled bool // shown only while a data-plane check is set
}

// checks are the readiness table's checks, in its order, made from the
// rows' names when the package is initialised.
var checks = checksOf(conditions[:])

func checksOf(rows []condition) []check {
	var cs []check
	for r, c := range rows {
		if len(cs) == 0 || cs[len(cs)-1].name != c.check {
			cs = append(cs, check{name: c.check, whileInstalled: c.whileInstalled})
		}
		cs[len(cs)-1].rows |= 1 << r
	}
	return cs
}

// checkMask holds checks by their index in checks, one bit each: those a
// query excludes.
type checkMask uint8

// rows returns the rows of the checks of m.
func (m checkMask) rows() reasonSet {
	var rs reasonSet
	for i, c := range checks {
		if m&(1<<i) != 0 {
			rs |= c.rows
		}
	}
	return rs
}

// verboseResponse builds a /readyz?verbose answer: for the unmet
// conditions, whether a data-plane check is installed, the checks the
// query excludes and whether it names one that is none. It is called
// when the verdict changes, never by a probe. Its words are the check
// names and the sentinels' texts, fixed when the package is initialised:
// no name, error or time of the process's state, and never a word of the
// client's, can reach the body. An excluded check that is shown only while
// a data-plane check is set stays hidden while none is; naming it is no
// mistake, so it never brings the warning.
func verboseResponse(unmet reasonSet, installed bool, excluded checkMask, unknown bool) response {
	var b strings.Builder
	for i, c := range checks {
		switch r := (unmet & c.rows).first(); {
		case c.whileInstalled && !installed:
		case excluded&(1<<i) != 0:
			b.WriteString("[+]" + c.name + " excluded: ok\n")
		case r != reasonReady:
			b.WriteString("[-]" + c.name + " failed: " + conditions[r].err.Error() + "\n")
		default:
			b.WriteString("[+]" + c.name + " ok\n")
		}
	}
	if unknown {
		// The API server names the checks it could not exclude; this
		// line cannot, as the names are the client's.
		b.WriteString("warn: some health checks cannot be excluded\n")
	}
	if unmet&^excluded.rows() != 0 {
		b.WriteString("readyz check failed\n")
		return newResponse(http.StatusServiceUnavailable, b.String())
	}
	b.WriteString("readyz check passed\n")
	return newResponse(http.StatusOK, b.String())
}

// readyzQuery is what a /readyz query asks for.
type readyzQuery struct {
	verbose  bool      // the key verbose, with or without a value
	excluded checkMask // the checks named by an exclude key
	unknown  bool      // an exclude key names no check
}

// parseReadyzQuery reads a /readyz query as url.ParseQuery would, without
// allocating: the query is split on '&' alone; a pair holding a ';' is
// skipped, as is a pair whose key or value has a malformed percent escape;
// keys and values are compared once unescaped, so "verb%6Fse" is "verbose"
// and '+' is a space. The one difference is url's cap on the number of
// parameters (10 000 by default), which a request within Serve's 4 KiB cap
// cannot reach.
//
// Agreeing with url.ParseQuery means that a handler wrapped around this
// one, or a proxy in front of it, that reads the query with the standard
// library sees the same verbose and excludes as this handler does.
func parseReadyzQuery(rawQuery string) readyzQuery {
	var q readyzQuery
	for rawQuery != "" {
		var pair string
		pair, rawQuery, _ = strings.Cut(rawQuery, "&")
		if strings.Contains(pair, ";") {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		if !validEscapes(k) || !validEscapes(v) {
			continue
		}
		switch {
		case unescapesTo(k, "verbose"):
			q.verbose = true
		case unescapesTo(k, "exclude"):
			i := checkNamed(v)
			if i < 0 {
				q.unknown = true
			} else {
				q.excluded |= 1 << i
			}
		}
	}
	return q
}

// checkNamed returns the index in checks of the check whose name the query
// component s unescapes to, or -1.
func checkNamed(s string) int {
	for i, c := range checks {
		if unescapesTo(s, c.name) {
			return i
		}
	}
	return -1
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

package listener

import "bytes"

// request is what parseRequest reads of a header: what the AnswerFunc
// routes, and whether the client may still be sending.
type request struct {
	method, path, rawQuery []byte
	http10                 bool // HTTP/1.0; otherwise answered as HTTP/1.1
	// mayStillSend: the header declares a body (a Content-Length above 0,
	// a Transfer-Encoding) or has an Expect. The body is never read as
	// one: the answer says "Connection: close", and the connection is held
	// (loop.send).
	mayStillSend bool
}

// headerEnd returns the length of the header that b starts with, through
// the blank line that ends it, or -1 while b holds no whole header. A line
// may end in a bare LF here, so that such a header is whole, and refused by
// parseRequest, rather than waited for until its deadline. seen is how much
// of b an earlier call looked at: a header that arrives a byte at a time
// is scanned once, not once per byte.
func headerEnd(b []byte, seen int) int {
	for i := max(seen-2, 0); ; {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return -1
		}
		i += j + 1
		switch {
		case i < len(b) && b[i] == '\n':
			return i + 1
		case i+1 < len(b) && b[i] == '\r' && b[i+1] == '\n':
			return i + 2
		}
	}
}

// parseRequest reads a whole header (headerEnd's) and reports whether it is
// well formed by RFC 9112: a request line of a token method, a target and
// HTTP/1.x, separated by single spaces; field lines of a token name, a
// colon and a value without control bytes but tab; every line ending in
// CRLF, none folded; one Host on HTTP/1.1, at most one on HTTP/1.0, of host
// bytes; Content-Lengths that are digits and agree. Stricter than net/http,
// it refuses what no client library writes: the two differ only where no
// probe goes, and a request never means one thing here, another to a proxy.
func parseRequest(header []byte) (request, bool) {
	var r request
	line, rest, ok := cutLine(header)
	if !ok || !r.parseRequestLine(line) {
		return r, false
	}
	hosts := 0
	var length []byte
	for {
		line, rest, ok = cutLine(rest)
		switch {
		case !ok || len(line) > 0 && (line[0] == ' ' || line[0] == '\t'):
			return r, false
		case len(line) == 0: // the blank line: rest is empty
			return r, hosts == 1 || hosts == 0 && r.http10
		}
		name, value, found := bytes.Cut(line, []byte(":"))
		value = bytes.Trim(value, " \t")
		if !found || !isToken(name) || !allIn(value, &fieldValueBytes) {
			return r, false
		}
		switch {
		case equalFold(name, "Host"):
			hosts++
			if !allIn(value, &hostBytes) {
				return r, false
			}
		case equalFold(name, "Content-Length"):
			if len(value) == 0 || !allIn(value, &digitBytes) || length != nil && !bytes.Equal(value, length) {
				return r, false
			}
			length = value
			r.mayStillSend = r.mayStillSend || len(bytes.TrimLeft(value, "0")) > 0
		case equalFold(name, "Transfer-Encoding"), equalFold(name, "Expect"):
			r.mayStillSend = true
		}
	}
}

// parseRequestLine reads "method SP target SP version". HTTP/1.x where x
// is not 0 is answered as HTTP/1.1, as RFC 9112 asks of a server; another
// major version is refused.
func (r *request) parseRequestLine(line []byte) bool {
	method, rest, ok1 := bytes.Cut(line, []byte(" "))
	target, version, ok2 := bytes.Cut(rest, []byte(" "))
	if !ok1 || !ok2 || !isToken(method) || len(target) == 0 || !allIn(target, &targetBytes) ||
		len(version) != len("HTTP/1.1") || !bytes.HasPrefix(version, []byte("HTTP/1.")) || !isDigit(version[7]) {
		return false
	}
	r.method, r.http10 = method, version[7] == '0'
	return r.parseTarget(target)
}

// parseTarget takes the path and query of an origin-form target
// ("/readyz?verbose") or an absolute-form one ("http://host/readyz").
// Another form (OPTIONS *, an authority) is routed whole as the path, no
// path of the caller's. A malformed escape in the path is refused; the
// query is the caller's to read.
func (r *request) parseTarget(target []byte) bool {
	if scheme, rest, ok := bytes.Cut(target, []byte("://")); ok && isScheme(scheme) {
		authority := rest
		if i := bytes.IndexAny(rest, "/?"); i >= 0 {
			authority, target = rest[:i], rest[i:]
		} else {
			target = nil
		}
		if !allIn(authority, &hostBytes) { // no userinfo: RFC 9110 forbids sending it
			return false
		}
	}
	if len(target) > 0 && target[0] != '/' && target[0] != '?' {
		r.path = target
		return true
	}
	path, query, _ := bytes.Cut(target, []byte("?"))
	r.path, r.rawQuery = path, query
	return validEscapes(path)
}

// cutLine cuts the line that b starts with, reporting false for a line that
// ends in a bare LF.
func cutLine(b []byte) (line, rest []byte, ok bool) {
	i := bytes.IndexByte(b, '\n')
	if i < 1 || b[i-1] != '\r' {
		return nil, nil, false
	}
	return b[:i-1], b[i+1:], true
}

// validEscapes reports whether every '%' in s starts an escape of two hex
// digits.
func validEscapes(s []byte) bool {
	for i := bytes.IndexByte(s, '%'); i >= 0; i = bytes.IndexByte(s, '%') {
		if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
			return false
		}
		s = s[i+3:]
	}
	return true
}

func isToken(s []byte) bool { return len(s) > 0 && allIn(s, &tokenBytes) }

// isScheme reports whether s is a URI scheme: a letter, then letters,
// digits, '+', '-' and '.'.
func isScheme(s []byte) bool {
	return len(s) > 0 && 'a' <= lower(s[0]) && lower(s[0]) <= 'z' && allIn(s, &schemeBytes)
}

func isDigit(b byte) bool { return '0' <= b && b <= '9' }

func isHex(b byte) bool { return isDigit(b) || 'a' <= lower(b) && lower(b) <= 'f' }

// The byte classes of RFC 9110 and RFC 3986 that parseRequest checks.
const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

var (
	tokenBytes  = byteClass(alnum+"!#$%&'*+-.^_`|~", "")
	schemeBytes = byteClass(alnum+"+-.", "")
	digitBytes  = byteClass("0123456789", "")
	// A host's and its port's bytes: reg-name, IP literal, zone.
	hostBytes = byteClass(alnum+"-._~!$&'()*+,;=:[]%", "")
	// A target holds visible ASCII alone; a field value also space, tab
	// and obs-text, never another control byte.
	targetBytes     = byteClass("", "!~")
	fieldValueBytes = byteClass(" \t", "!~\x80\xff")
)

// byteClass is the set of the bytes of members and of each range of
// ranges, a pair of bounds.
func byteClass(members, ranges string) (set [256]bool) {
	for i := range len(members) {
		set[members[i]] = true
	}
	for i := 0; i+1 < len(ranges); i += 2 {
		for b := int(ranges[i]); b <= int(ranges[i+1]); b++ {
			set[b] = true
		}
	}
	return set
}

func allIn(s []byte, set *[256]bool) bool {
	for _, b := range s {
		if !set[b] {
			return false
		}
	}
	return true
}

// equalFold reports whether s is name, ASCII letters case folded.
func equalFold(s []byte, name string) bool {
	if len(s) != len(name) {
		return false
	}
	for i := range len(s) {
		if lower(s[i]) != lower(name[i]) {
			return false
		}
	}
	return true
}

func lower(b byte) byte {
	if 'A' <= b && b <= 'Z' {
		return b + 'a' - 'A'
	}
	return b
}

package health

// The byte classes the package checks text against (Listen's host, a
// watchdog's name, a query's escapes, a stack's header), each written once.
// They are ASCII alone: every such text that is not ASCII is refused or is
// no name of ours.

// allBytes reports whether every byte of s is in the class in.
func allBytes(s string, in func(byte) bool) bool {
	for i := 0; i < len(s); i++ {
		if !in(s[i]) {
			return false
		}
	}
	return true
}

// isGraphic reports whether b is printable ASCII other than the space
// (0x21 to 0x7e).
func isGraphic(b byte) bool { return '!' <= b && b <= '~' }

// isGraphicOrSpace reports whether b is printable ASCII, the space
// included (0x20 to 0x7e).
func isGraphicOrSpace(b byte) bool { return b == ' ' || isGraphic(b) }

func isDigit(b byte) bool { return '0' <= b && b <= '9' }

func isLetterOrDigit(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || isDigit(b)
}

func isHex(b byte) bool {
	return isDigit(b) || 'a' <= b && b <= 'f' || 'A' <= b && b <= 'F'
}

// unhex is the value of the hex digit b.
func unhex(b byte) byte {
	switch {
	case b >= 'a':
		return b - 'a' + 10
	case b >= 'A':
		return b - 'A' + 10
	}
	return b - '0'
}

//go:build unix && !linux

package listener

import "testing"

// peekOffsetWorks is false outside Linux, where the room never peeks.
func peekOffsetWorks(*testing.T) bool { return false }

// withoutPeekOffset reports false: outside Linux the room never peeks, so
// there is no kernel to take the option from.
func withoutPeekOffset(*testing.T) bool { return false }

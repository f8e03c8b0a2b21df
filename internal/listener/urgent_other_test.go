//go:build unix && !linux

package listener

import "testing"

// peekOffsetWorks is false outside Linux, where the room never peeks.
func peekOffsetWorks(*testing.T) bool { return false }

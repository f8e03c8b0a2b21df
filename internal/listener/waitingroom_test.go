package listener

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestRoomSize: what three quarters of the soft descriptor limit leave
// beside the slots, at least one and at most maxWaiting.
func TestRoomSize(t *testing.T) {
	for _, tc := range []struct {
		soft  uint64
		limit int
		want  int
	}{
		{0, 256, maxWaiting}, // unknown
		{1024, 256, 512},
		{128, 32, 64},
		{20_000, 256, maxWaiting},
		{math.MaxUint64, 256, maxWaiting}, // RLIM_INFINITY
		{1024, 768, 1},
		{1024, 5000, 1},
	} {
		t.Run(fmt.Sprintf("soft %d, %d slots", tc.soft, tc.limit), func(t *testing.T) {
			assert.Equal(t, tc.want, roomSize(tc.soft, tc.limit))
		})
	}
}

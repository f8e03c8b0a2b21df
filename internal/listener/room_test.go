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

// TestHandoffQueueWithinTheBudget: the hand-off queue is at most a quarter
// of the slots, so that slots, queue and room stay within three quarters
// of the soft descriptor limit.
func TestHandoffQueueWithinTheBudget(t *testing.T) {
	for _, tc := range []struct{ limit, want int }{{1, 1}, {16, 4}, {32, 8}, {256, 64}, {1024, 64}} {
		assert.Equal(t, tc.want, queueFor(tc.limit), "%d slots", tc.limit)
	}
	for _, soft := range []uint64{64, 128, 256, 1024} {
		limit := limitFor(soft)
		held := limit + queueFor(limit) + roomSize(soft, limit+queueFor(limit))
		assert.LessOrEqual(t, held, int(soft*3/4), "soft limit %d", soft)
	}
}

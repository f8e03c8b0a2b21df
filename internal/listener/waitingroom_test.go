package listener

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

// TestRoomsShareTheBudget: Serve calls running together size their rooms
// from one budget, and give back what they held when they end.
func TestRoomsShareTheBudget(t *testing.T) {
	budget.Lock()
	before := budget.held // a test's limiter that never waited keeps its share
	budget.held = 0
	budget.Unlock()

	first := reserveRoom(2048, 256)  // 1536 - 256
	second := reserveRoom(2048, 256) // nothing left: one
	third := reserveRoom(2048, 256)
	assert.Equal(t, []int{1280, 1, 1}, []int{first, second, third})
	releaseRoom(256 + first)
	assert.Equal(t, 1536-(256+1)-(256+1)-256, reserveRoom(2048, 256), "what the first gave back")
	budget.Lock()
	budget.held = 0
	budget.Unlock()
	defer func() {
		budget.Lock()
		budget.held = before
		budget.Unlock()
	}()

	ln, err := Listen("127.0.0.1:0")
	require.NoError(t, err)
	l := newConnLimiter(ln, 256, Options{Counters: new(Counters), Log: discardLog})
	held := func() int {
		budget.Lock()
		defer budget.Unlock()
		return budget.held
	}
	assert.Equal(t, 256+roomSize(softDescriptorLimit(), 256), held(), "a Serve's slots and room")
	require.NoError(t, l.Close())
	l.wait()
	assert.Zero(t, held(), "given back")
}

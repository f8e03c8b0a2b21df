package listener

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

type listItem struct {
	id int
	links[listItem]
}

// ids returns the ids in l, front to back, and checks that walking it
// back to front gives the same ids reversed.
func ids(t *testing.T, l *list[listItem, *listItem]) []int {
	t.Helper()
	var forward, backward []int
	for e := l.front(); e != nil; e = e.next {
		forward = append(forward, e.id)
	}
	for e := l.tail; e != nil; e = e.prev {
		backward = append([]int{e.id}, backward...)
	}
	assert.Equal(t, forward, backward, "the links back")
	assert.Len(t, forward, l.len)
	return forward
}

// TestList removes elements from the front, the middle and the back, adds
// one back after its removal, and empties the list: the order is the order
// of addition, and nothing is allocated.
func TestList(t *testing.T) {
	var l list[listItem, *listItem]
	items := make([]listItem, 5)
	for i := range items {
		items[i].id = i
		l.pushBack(&items[i])
	}
	assert.Equal(t, []int{0, 1, 2, 3, 4}, ids(t, &l))
	l.remove(&items[2])
	assert.Equal(t, []int{0, 1, 3, 4}, ids(t, &l))
	l.remove(&items[0])
	assert.Equal(t, []int{1, 3, 4}, ids(t, &l))
	l.remove(&items[4])
	assert.Equal(t, []int{1, 3}, ids(t, &l))
	l.pushBack(&items[0])
	assert.Equal(t, []int{1, 3, 0}, ids(t, &l))
	for e := l.front(); e != nil; e = l.front() {
		l.remove(e)
		assert.Equal(t, links[listItem]{}, e.links, "a removed element keeps no links")
	}
	assert.Empty(t, ids(t, &l))

	allocs := testing.AllocsPerRun(100, func() {
		l.pushBack(&items[1])
		l.pushBack(&items[2])
		l.remove(&items[1])
		l.remove(l.front())
	})
	assert.Zero(t, allocs)
}

package listener

// list is an intrusive doubly linked list, in the order its elements were
// added, so that the oldest is at hand and any one leaves in O(1) without
// a search or an allocation. Each element embeds its links; P is the
// element's pointer type, through which the list reaches them.
type list[T any, P listElement[T]] struct {
	head, tail P
	len        int
}

// listElement is a pointer to an element of a list.
type listElement[T any] interface {
	*T
	listLinks() *links[T]
}

// links are an element's place in a list; an element is in one list at a
// time.
type links[T any] struct{ prev, next *T }

func (l *links[T]) listLinks() *links[T] { return l }

func (l *list[T, P]) front() P { return l.head }

func (l *list[T, P]) pushBack(e P) {
	el := e.listLinks()
	el.prev, el.next = l.tail, nil
	if l.tail != nil {
		l.tail.listLinks().next = e
	} else {
		l.head = e
	}
	l.tail = e
	l.len++
}

func (l *list[T, P]) remove(e P) {
	el := e.listLinks()
	if el.prev != nil {
		P(el.prev).listLinks().next = el.next
	} else {
		l.head = el.next
	}
	if el.next != nil {
		P(el.next).listLinks().prev = el.prev
	} else {
		l.tail = el.prev
	}
	el.prev, el.next = nil, nil
	l.len--
}

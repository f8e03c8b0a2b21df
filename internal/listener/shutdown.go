package listener

import "context"

// shutdown closes every connection without a whole request, in the room
// and in the slots, and stops admitting more: it has nothing to answer,
// and would only hold Serve's shutdown until its header timeout. One
// answered is held to its time, as a plain server's Shutdown waits for it.
// Each is closed having read what it was sent (discardUnread), so with a
// FIN, even where net/http's goroutine had not yet read its header.
func (l *connLimiter) shutdown() {
	l.stop()
	if l.room != nil {
		l.room.stop()
	}
	l.mu.Lock()
	l.closing = true
	var victims []*limitedConn
	for c := l.waiting.front(); c != nil; c = l.waiting.front() {
		l.evict(c)
		victims = append(victims, c)
	}
	l.released.Broadcast()
	l.mu.Unlock()
	for _, c := range victims {
		discardUnread(c.Conn)
		_ = c.Conn.Close()
	}
}

// stop ends the hand-off, once.
func (l *connLimiter) stop() { l.stopOnce.Do(func() { close(l.done) }) }

// Close closes the listener, which ends the accepting goroutine, and the
// hand-off.
func (l *connLimiter) Close() error {
	err := l.Listener.Close()
	l.stop()
	return err
}

// finish waits, until ctx's end at most, for the room to let go of what
// it holds after an answer; net/http must have stopped. The accepting
// goroutine ends first: a connection it has just answered joins the room
// after, and a room that finished before would close it over its linger.
func (l *connLimiter) finish(ctx context.Context) {
	if l.room == nil {
		return
	}
	select {
	case <-l.acceptEnd:
	case <-ctx.Done():
	}
	l.room.finish(ctx)
}

// wait closes the room, and returns once every goroutine the limiter
// started, and every connection's it gave net/http, has ended.
func (l *connLimiter) wait() {
	if l.room != nil {
		l.room.close()
	}
	l.goroutines.Wait()
	if len(l.handoff) > 0 { // handed on after net/http's last Accept
		rd := newReader(nil)
		for len(l.handoff) > 0 {
			if h := <-l.handoff; h.nc != nil {
				rd.discard(h.nc)
				_ = h.nc.Close()
			}
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.held > 0 {
		l.released.Wait()
	}
}

// stop closes what awaits its header, and lets no more join.
func (r *room) stop() {
	r.mu.Lock()
	r.stopping = true
	waiters := r.take(false)
	r.mu.Unlock()
	if len(waiters) == 0 {
		return
	}
	rd := newReader(nil) // the room's own is its goroutine's
	for _, w := range waiters {
		rd.discard(w.nc)
		_ = w.nc.Close()
	}
}

// finish lets the room's goroutine end once the room is empty, and waits
// for that, or until ctx's end, when it closes the rest.
func (r *room) finish(ctx context.Context) {
	r.mu.Lock()
	r.finishing = true
	r.arm(MonotonicNow()) // the goroutine may wait with no deadline: wake it to look
	r.mu.Unlock()
	select {
	case <-r.ended:
	case <-ctx.Done():
		r.close()
	}
}

// close closes every connection in the room, then the epoll set, which
// ends the room's goroutine.
func (r *room) close() {
	r.mu.Lock()
	r.closed = true
	all := r.take(true)
	r.mu.Unlock()
	for _, w := range all {
		_ = w.nc.Close()
	}
	_ = r.set.close()
}

package health

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The kernel holds a silent connection until its first bytes under
// TCP_DEFER_ACCEPT, and completes it empty only with a SYN cookie, which a
// test cannot ask for. These tests clear the deferral instead: every
// connection then arrives as a SYN cookie's does, with whatever its client
// has sent by then.

// clearDeferAccept turns TCP_DEFER_ACCEPT off on a listener that Serve or
// newConnLimiter has set it on.
func clearDeferAccept(t *testing.T, ln net.Listener) {
	t.Helper()
	rc, err := ln.(syscall.Conn).SyscallConn()
	require.NoError(t, err)
	var serr error
	require.NoError(t, rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_DEFER_ACCEPT, 0)
	}))
	require.NoError(t, serr)
}

// quarantineRig is a connLimiter driven without net/http, so that every
// close is the limiter's or the quarantine's, with Accept running in a
// loop of its own as net/http's would.
type quarantineRig struct {
	t         *testing.T
	l         *connLimiter
	counters  *connCounters
	addr      string
	accepted  chan *limitedConn
	acceptErr chan error
}

// newQuarantineRig makes a limiter of limit slots on a fresh listener
// without deferred accept, and fills the slots with stalled connections to
// where an empty newcomer goes to the quarantine (crowded). Accept runs
// from then on; the test's cleanup closes the limiter, which ends it.
func newQuarantineRig(t *testing.T, limit int, grace time.Duration) *quarantineRig {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	r := &quarantineRig{t: t, counters: &connCounters{}, addr: ln.Addr().String(), accepted: make(chan *limitedConn, 64), acceptErr: make(chan error, 1)}
	r.l = newConnLimiter(ln, limit, r.counters, discardLogger().Log)
	require.NotNil(t, r.l.quarantine.poller)
	r.l.quarantine.grace = grace
	clearDeferAccept(t, ln)
	for !r.l.crowded() {
		dialStalled(t, r.addr)
		nc, err := r.l.Accept()
		require.NoError(t, err)
		require.Equal(t, slotWaiting, nc.(*limitedConn).state)
	}
	go func() {
		for {
			nc, err := r.l.Accept()
			if err != nil {
				r.acceptErr <- err
				return
			}
			r.accepted <- nc.(*limitedConn)
		}
	}()
	t.Cleanup(func() {
		// shutdown first: net/http is not here to end the goroutines of
		// the connections evicted, so Accept may be waiting for a slot.
		r.l.shutdown()
		_ = r.l.Close()
		select {
		case <-r.acceptErr:
		case <-time.After(10 * time.Second):
			t.Error("Accept did not return once the limiter was closed")
		}
	})
	return r
}

// held is heldIn of the rig's quarantine.
func (r *quarantineRig) held() (silent []string, ready int) { return heldIn(r.l.quarantine) }

// heldIn returns the clients' addresses of the connections q holds
// silent, oldest first, and how many have spoken and wait for Accept.
func heldIn(q *quarantine) (silent []string, ready int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for c := q.silent.front(); c != nil; c = c.next {
		silent = append(silent, c.nc.RemoteAddr().String())
	}
	return silent, len(q.ready)
}

// dialEmpty connects and sends nothing, and returns once the quarantine
// holds the connection.
func (r *quarantineRig) dialEmpty() net.Conn {
	r.t.Helper()
	c, err := net.Dial("tcp", r.addr)
	require.NoError(r.t, err)
	r.t.Cleanup(func() { _ = c.Close() })
	eventually(r.t, func() bool {
		silent, _ := r.held()
		for _, a := range silent {
			if a == c.LocalAddr().String() {
				return true
			}
		}
		return false
	}, "the empty newcomer held in quarantine")
	return c
}

func (r *quarantineRig) live() int64 { return r.counters.held.Load() }

// TestQuarantineAdmitsOnBytes: an empty newcomer under pressure is held,
// costs no slot, and once its request arrives Accept hands it on with the
// request unread, as a connection being answered, which no eviction
// touches. It counts as accepted once.
func TestQuarantineAdmitsOnBytes(t *testing.T) {
	r := newQuarantineRig(t, 4, time.Minute)
	held, accepted := r.live(), r.counters.accepted.Load()
	probe := r.dialEmpty()
	assert.Equal(t, held, r.live(), "no slot while silent")
	assert.Equal(t, accepted+1, r.counters.accepted.Load())

	const request = "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n"
	_, err := io.WriteString(probe, request)
	require.NoError(t, err)
	var c *limitedConn
	select {
	case c = <-r.accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("Accept did not hand on the connection that spoke")
	}
	assert.Equal(t, probe.LocalAddr().String(), c.RemoteAddr().String())
	assert.Equal(t, slotActive, c.state, "its request is complete: never evicted")
	assert.Equal(t, held+1, r.live())
	assert.Equal(t, accepted+1, r.counters.accepted.Load(), "counted once")
	silent, ready := r.held()
	assert.Empty(t, silent)
	assert.Zero(t, ready)

	got := make([]byte, len(request))
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = io.ReadFull(c, got)
	require.NoError(t, err)
	assert.Equal(t, request, string(got), "the request is still there for net/http")
}

// TestQuarantineClosesAfterGrace: a newcomer that stays silent is closed
// once its grace has passed, and not before, without an Accept call or a
// new connection to wake anything; it counts as evicted.
func TestQuarantineClosesAfterGrace(t *testing.T) {
	r := newQuarantineRig(t, 4, quarantineGrace)
	start := time.Now()
	c := r.dialEmpty()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := c.Read(make([]byte, 1))
	elapsed := time.Since(start)
	assert.Zero(t, n)
	assert.ErrorIs(t, err, io.EOF)
	// Its grace counts from its accept, which comes after the dial began.
	assert.GreaterOrEqual(t, elapsed, quarantineGrace, "closed before its grace ran out")
	assert.Less(t, elapsed, quarantineGrace+time.Second, "held well past its grace")
	eventually(t, func() bool { return r.counters.evicted.Load() == 1 }, "counted as evicted")
	assert.True(t, r.counters.status().Pressure)
	silent, _ := r.held()
	assert.Empty(t, silent)
}

// TestQuarantineFullClosesTheOldest: the quarantine holds the
// descriptor budget at most, less the slots in use; full, it
// makes room for a newcomer by closing the connection held longest,
// silent still, counted as evicted. It does not move it to a slot, where
// it would cost a goroutine to wait on.
func TestQuarantineFullClosesTheOldest(t *testing.T) {
	const limit = 8
	r := newQuarantineRig(t, limit, time.Minute)
	room := r.l.quarantineRoom()
	require.Equal(t, 3*limit-int(r.live()), room)
	held, evicted := r.live(), r.counters.evicted.Load()
	var clients []net.Conn
	for i := 0; i < room+2; i++ {
		clients = append(clients, r.dialEmpty())
	}
	silent, _ := r.held()
	var want []string
	for _, c := range clients[2:] {
		want = append(want, c.LocalAddr().String())
	}
	assert.Equal(t, want, silent, "the newest, in order")
	for i, c := range clients[:2] {
		assertClosedByServer(t, c, "client %d, among the oldest", i)
	}
	assert.Equal(t, evicted+2, r.counters.evicted.Load())
	assert.Equal(t, held, r.live(), "no slot taken")
	select {
	case got := <-r.accepted:
		t.Errorf("%v admitted to a slot", got.RemoteAddr())
	default:
	}
}

// TestQuarantineNeverHoldsTheClosed: a connection whose client has gone
// before it spoke, with a FIN or a reset, never takes a slot, whether the
// peek at accept or the quarantine finds it gone; it is not counted as
// evicted either, as the server closed nothing that was alive.
func TestQuarantineNeverHoldsTheClosed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		leave func(*net.TCPConn)
	}{
		{"FIN", func(c *net.TCPConn) { _ = c.CloseWrite() }},
		{"reset", func(c *net.TCPConn) { _ = c.SetLinger(0); _ = c.Close() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newQuarantineRig(t, 4, time.Minute)
			held, accepted := r.live(), r.counters.accepted.Load()
			// Gone before its accept.
			c, err := net.Dial("tcp", r.addr)
			require.NoError(t, err)
			defer c.Close()
			tc.leave(c.(*net.TCPConn))
			// Gone once held.
			c = r.dialEmpty()
			tc.leave(c.(*net.TCPConn))
			eventually(t, func() bool {
				silent, ready := r.held()
				return r.counters.accepted.Load() == accepted+2 && len(silent) == 0 && ready == 0
			}, "both accepted, and neither held")
			assert.Equal(t, held, r.live(), "no slot taken")
			assert.Zero(t, r.counters.evicted.Load())
			assert.Empty(t, r.accepted, "nothing handed to net/http")
		})
	}
}

// TestQuarantineShutdown: when Serve stops, everything held is closed, and
// the Accept waiting while they were held returns within a look.
func TestQuarantineShutdown(t *testing.T) {
	r := newQuarantineRig(t, 4, time.Minute)
	a, b := r.dialEmpty(), r.dialEmpty()
	r.l.shutdown()
	assertClosedByServer(t, a)
	assertClosedByServer(t, b)
	select {
	case err := <-r.acceptErr:
		assert.ErrorIs(t, err, net.ErrClosed)
		r.acceptErr <- err // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("Accept kept waiting after shutdown")
	}
	silent, ready := r.held()
	assert.Empty(t, silent)
	assert.Zero(t, ready)
	assert.Zero(t, r.counters.evicted.Load(), "closed by the shutdown, not for room")
	assert.False(t, r.l.quarantine.hold(a, descriptorOf(t, a), roomForAll), "nothing is held once closed")
}

// TestQuarantineNotUnderPressure: below the eviction threshold an empty
// newcomer takes a slot at once, as before, and the quarantine stays idle.
func TestQuarantineNotUnderPressure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var counters connCounters
	l := newConnLimiter(ln, 8, &counters, discardLogger().Log)
	defer l.Close()
	clearDeferAccept(t, ln)
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	nc, err := l.Accept()
	require.NoError(t, err)
	assert.Equal(t, c.LocalAddr().String(), nc.RemoteAddr().String())
	assert.Equal(t, slotWaiting, nc.(*limitedConn).state)
	silent, ready := heldIn(l.quarantine)
	assert.Empty(t, silent)
	assert.Zero(t, ready)
}

// TestLateProbeSurvivesEmptyAccepts is the SYN-cookie condition in
// miniature: with the deferral off, every connection is accepted with
// whatever it has sent, and a churn of stalled clients evicts the oldest
// waiting connection several times a millisecond. A probe that writes its
// request 20 ms after its handshake is accepted empty; admitted to a slot,
// it would be among the first evicted. Held in quarantine, it is answered.
// The idle clients beside the churn stay within what the quarantine can
// hold: more silent arrivals than that within a probe's delay would close
// the probe too (docs/load.md, at a descriptor limit of 128).
func TestLateProbeSurvivesEmptyAccepts(t *testing.T) {
	floodTest(t)
	const limit = 8
	s, _, ln := listenReady(t)
	addr, _ := startServingOn(t, ln, func(ctx context.Context, ln net.Listener) error { return s.serve(ctx, ln, limit) })
	assertProbesAnswered(t, addr, 1) // Serve has set the deferral by now
	clearDeferAccept(t, ln)

	// A stalled client is silent from its accept until its write, which
	// on a busy machine can come milliseconds later: at most limit of
	// them and limit/2 idle ones are silent at once, with the probe fewer
	// than the quarantine holds.
	stopStalled := flood(t, addr, limit, stalled)
	stopIdle := flood(t, addr, limit/2, idle)
	eventually(t, func() bool { return s.conns.evicted.Load() > 1000 }, "the churn evicting")
	// The flood runs in this process, on the test's cores: a probe whose
	// request went out past the grace, delayed by the scheduler, says
	// nothing about the quarantine, and is sent again.
	answered := 0
	for i := 0; answered < 10 && i < 100; i++ {
		path := []string{"/healthz", "/readyz"}[i%2]
		got, late, err := lateProbe(addr, path, 20*time.Millisecond)
		if late >= quarantineGrace {
			continue
		}
		require.NoError(t, err, "probe %d of %s, sent %v after its handshake", i, path, late)
		assert.True(t, strings.HasPrefix(got, "HTTP/1.1 200 OK\r\n") && strings.HasSuffix(got, "\r\n\r\nok\n"), "probe %d: %q", i, got)
		answered++
	}
	assert.Equal(t, 10, answered, "probes sent within the grace")
	stopStalled()
	stopIdle()
	eventually(t, func() bool { return s.conns.held.Load() == 0 }, "every slot released")
}

// lateProbe connects, waits delay, sends a kubelet's request for path and
// returns the whole answer, and how long after the handshake the request
// was in fact sent.
func lateProbe(addr, path string, delay time.Duration) (answer string, late time.Duration, err error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", 0, err
	}
	defer c.Close()
	connected := time.Now()
	time.Sleep(delay) // the busy kubelet: the delay is the subject, not a wait for something
	late = time.Since(connected)
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: "+addr+"\r\nUser-Agent: kube-probe/1.31\r\nAccept: */*\r\nConnection: close\r\n\r\n"); err != nil {
		return "", late, err
	}
	got, err := io.ReadAll(c)
	if err == nil && len(got) == 0 {
		err = errors.New("closed before any answer: evicted")
	}
	return string(got), late, err
}

// heldDeadline returns the deadline of the connection held longest.
func heldDeadline(t *testing.T, q *quarantine) time.Time {
	t.Helper()
	q.mu.Lock()
	defer q.mu.Unlock()
	c := q.silent.front()
	require.NotNil(t, c, "a connection held")
	return c.deadline
}

// sleepPast sleeps until deadline has passed: a stall of Accept's
// goroutine across it (CFS throttling, say), which is the subject.
func sleepPast(deadline time.Time) {
	for time.Now().Before(deadline.Add(time.Millisecond)) {
		time.Sleep(time.Until(deadline.Add(time.Millisecond)))
	}
}

// newQuarantineLimiter makes a limiter of 8 slots on a fresh listener
// without deferred accept, whose quarantine gives grace, driven by the
// test alone: no Accept runs but the test's.
func newQuarantineLimiter(t *testing.T, grace time.Duration) (*connLimiter, net.Listener, *connCounters) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	counters := &connCounters{}
	l := newConnLimiter(ln, 8, counters, discardLogger().Log)
	t.Cleanup(func() { _ = l.Close() })
	require.NotNil(t, l.quarantine.poller)
	l.quarantine.grace = grace
	clearDeferAccept(t, ln)
	return l, ln, counters
}

// dialHeld connects a client and has the quarantine hold its connection,
// accepted from ln directly.
func dialHeld(t *testing.T, ln net.Listener, q *quarantine) (client, held net.Conn) {
	t.Helper()
	client, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	held, err = ln.Accept()
	require.NoError(t, err)
	require.True(t, q.hold(held, descriptorOf(t, held), roomForAll), "held")
	return client, held
}

// roomForAll is a quarantine's room when a test holds connections in it
// directly, as many as it likes.
const roomForAll = 1 << 20

// descriptorOf returns the descriptor behind a connection.
func descriptorOf(t *testing.T, nc net.Conn) int32 {
	t.Helper()
	rc, err := nc.(syscall.Conn).SyscallConn()
	require.NoError(t, err)
	fd := -1
	require.NoError(t, rc.Control(func(s uintptr) { fd = int(s) }))
	return int32(fd)
}

const healthzRequest = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"

// TestPollerReportsOnceByID: a watched connection is reported once, when
// its request arrives, by the 64-bit id it was watched with (both halves
// of the event's data), not by its descriptor, and never again.
func TestPollerReportsOnceByID(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	p, err := newReadinessPoller()
	require.NoError(t, err)
	defer p.close()
	client, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer client.Close()
	nc, err := ln.Accept()
	require.NoError(t, err)
	defer nc.Close()
	const id = 0xfedcba98_76543210
	require.NoError(t, p.watch(descriptorOf(t, nc), id))
	ids, err := p.poll()
	require.NoError(t, err)
	assert.Empty(t, ids, "nothing has arrived")

	_, err = io.WriteString(client, healthzRequest)
	require.NoError(t, err)
	eventually(t, func() bool { return spoke(nc) }, "the request in the receive queue")
	ids, err = p.poll()
	require.NoError(t, err)
	assert.Equal(t, []uint64{id}, ids)
	ids, err = p.poll()
	require.NoError(t, err)
	assert.Empty(t, ids, "nothing more: one-shot")
}

// TestQuarantineHandsOnWhatSpokeBeforeALateLook is the stall across a
// deadline: a held probe speaks within its grace, and Accept looks again
// only after the grace has run out. The probe is handed on, not closed as
// silent.
func TestQuarantineHandsOnWhatSpokeBeforeALateLook(t *testing.T) {
	l, ln, counters := newQuarantineLimiter(t, 20*time.Millisecond)
	q := l.quarantine
	client, _ := dialHeld(t, ln, q)
	_, err := io.WriteString(client, healthzRequest)
	require.NoError(t, err)
	sleepPast(heldDeadline(t, q))
	other, err := net.Dial("tcp", ln.Addr().String()) // for the listener, were the probe closed
	require.NoError(t, err)
	defer other.Close()

	nc, fresh, err := q.next()
	require.NoError(t, err)
	defer nc.Close()
	assert.False(t, fresh, "the held probe, not a newcomer")
	assert.Equal(t, client.LocalAddr().String(), nc.RemoteAddr().String())
	assert.Zero(t, counters.evicted.Load())
}

// TestQuarantineLookSparesWhatSpoke: a connection whose bytes, FIN or
// reset arrived within its grace is never closed as silent, however late
// Accept looks; it is handed on, and Accept's peek decides.
func TestQuarantineLookSparesWhatSpoke(t *testing.T) {
	for _, tc := range []struct {
		name  string
		speak func(*net.TCPConn)
	}{
		{"request", func(c *net.TCPConn) { _, _ = io.WriteString(c, healthzRequest) }},
		{"FIN", func(c *net.TCPConn) { _ = c.CloseWrite() }},
		{"reset", func(c *net.TCPConn) { _ = c.SetLinger(0); _ = c.Close() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, ln, counters := newQuarantineLimiter(t, 20*time.Millisecond)
			q := l.quarantine
			client, held := dialHeld(t, ln, q)
			tc.speak(client.(*net.TCPConn))
			eventually(t, func() bool { return spoke(held) }, "its bytes or its end arrived")
			sleepPast(heldDeadline(t, q))

			q.look(time.Now())
			assert.Zero(t, counters.evicted.Load(), "not closed as silent")
			q.mu.Lock()
			silent, ready := q.silent.len, append([]*heldConn(nil), q.ready...)
			q.mu.Unlock()
			assert.Zero(t, silent)
			require.Len(t, ready, 1, "handed on")
			assert.Same(t, held, ready[0].nc)
			nc, fresh, err := q.next()
			require.NoError(t, err)
			assert.Same(t, held, nc)
			assert.False(t, fresh)
			_ = nc.Close()
		})
	}
}

// TestQuarantineLookTakesEveryBatch: more held connections speak than one
// poll reports. A look after their grace hands every one of them on, none
// closed as silent: the events past the first batch are in by then too.
func TestQuarantineLookTakesEveryBatch(t *testing.T) {
	l, ln, counters := newQuarantineLimiter(t, 20*time.Millisecond)
	q := l.quarantine
	const n = 2*pollerBatch + 1
	var held []net.Conn
	for range n {
		client, nc := dialHeld(t, ln, q)
		_, err := io.WriteString(client, healthzRequest)
		require.NoError(t, err)
		held = append(held, nc)
	}
	for i, nc := range held {
		eventually(t, func() bool { return spoke(nc) }, fmt.Sprintf("request %d arrived", i))
	}
	q.mu.Lock()
	newest := q.silent.tail.deadline
	q.mu.Unlock()
	sleepPast(newest)

	q.look(time.Now())
	assert.Zero(t, counters.evicted.Load(), "closed as silent")
	silent, ready := heldIn(q)
	assert.Empty(t, silent)
	assert.Equal(t, n, ready, "every one handed on")
}

// TestQuarantineHandsOnWithinALook: a held connection that speaks while
// no newcomer arrives is handed on by the next look, quarantineLook at
// most after the last; the listener's deadline wakes Accept for it.
func TestQuarantineHandsOnWithinALook(t *testing.T) {
	l, ln, _ := newQuarantineLimiter(t, time.Minute)
	q := l.quarantine
	client, held := dialHeld(t, ln, q)
	newcomer, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer newcomer.Close()
	nc, fresh, err := q.next() // looks, then takes the newcomer
	require.NoError(t, err)
	require.True(t, fresh)
	defer nc.Close()

	_, err = io.WriteString(client, healthzRequest)
	require.NoError(t, err)
	eventually(t, func() bool { return spoke(held) }, "the request arrived")
	start := time.Now()
	done := make(chan net.Conn, 1)
	go func() {
		nc, fresh, err := q.next()
		assert.NoError(t, err)
		assert.False(t, fresh)
		done <- nc
	}()
	select {
	case nc := <-done:
		// 5 ms, as the CHANGELOG says, with a margin for a loaded
		// machine's scheduler; a look ten times as rare would miss it.
		assert.Less(t, time.Since(start), 100*time.Millisecond, "handed on past its look")
		assert.Same(t, held, nc)
	case <-time.After(10 * time.Second):
		t.Fatal("Accept kept waiting for a newcomer")
	}
}

// TestQuarantineShrinkSparesWhatSpoke: out of descriptors, Accept
// has the quarantine give back the one held longest before its grace has
// run out. One whose request arrived since Accept last looked is handed on,
// not closed; only a silent one is closed, and counted as evicted.
func TestQuarantineShrinkSparesWhatSpoke(t *testing.T) {
	l, ln, counters := newQuarantineLimiter(t, time.Minute)
	q := l.quarantine
	spoken, heldSpoken := dialHeld(t, ln, q)
	silentClient, _ := dialHeld(t, ln, q)
	_, err := io.WriteString(spoken, healthzRequest)
	require.NoError(t, err)
	eventually(t, func() bool { return spoke(heldSpoken) }, "the request in the receive queue")

	require.True(t, q.shrink(0))
	assert.Zero(t, counters.evicted.Load(), "the one that spoke is not closed")
	silent, ready := heldIn(q)
	assert.Equal(t, []string{silentClient.LocalAddr().String()}, silent)
	assert.Equal(t, 1, ready, "handed on")

	require.True(t, q.shrink(0))
	assert.EqualValues(t, 1, counters.evicted.Load(), "the silent one closed")
	assertClosedByServer(t, silentClient)
	assert.False(t, q.shrink(0), "nothing silent left")
}

// TestQuarantineLooksOnlyWhileHolding: while a connection is held, the
// listener's Accept gets a deadline, so that Accept comes round to look;
// once nothing is held, the deadline is cleared and Accept waits for the
// next connection alone, without waking.
func TestQuarantineLooksOnlyWhileHolding(t *testing.T) {
	l, ln, counters := newQuarantineLimiter(t, 20*time.Millisecond)
	q := l.quarantine
	dialHeld(t, ln, q)
	type result struct {
		nc    net.Conn
		fresh bool
		err   error
	}
	done := make(chan result, 1)
	go func() {
		nc, fresh, err := q.next()
		done <- result{nc, fresh, err}
	}()
	eventually(t, func() bool { return counters.evicted.Load() == 1 }, "the silent one closed after its grace")
	newcomer, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer newcomer.Close()
	var got result
	select {
	case got = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Accept did not return the newcomer")
	}
	require.NoError(t, got.err)
	defer got.nc.Close()
	assert.True(t, got.fresh)
	assert.Equal(t, newcomer.LocalAddr().String(), got.nc.RemoteAddr().String())
	assert.True(t, q.acceptDeadline.IsZero(), "the listener's deadline is cleared once nothing is held")
}

// TestQuarantineForgetsWhatItCloses: a held connection closed as silent
// stays in the poller's set while any other reference to its socket lives
// (a child between fork and exec, here a dup). Once the next held
// connection has taken its descriptor number, the old socket's event must
// not hand on the new one.
func TestQuarantineForgetsWhatItCloses(t *testing.T) {
	l, ln, counters := newQuarantineLimiter(t, 20*time.Millisecond)
	q := l.quarantine
	clientA, heldA := dialHeld(t, ln, q)
	fdA := descriptorOf(t, heldA)
	dupA, err := syscall.Dup(int(fdA)) // the child's reference
	require.NoError(t, err)
	defer syscall.Close(dupA)
	// Clients dialled before A closes, so that their own sockets do not
	// take its descriptor number.
	var queued []net.Conn
	for range 16 {
		c, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		defer c.Close()
		queued = append(queued, c)
	}
	sleepPast(heldDeadline(t, q))
	q.expire(time.Now())
	require.EqualValues(t, 1, counters.evicted.Load(), "A closed as silent")

	// The next connection accepted takes A's descriptor number, once any
	// lower free one is taken.
	q.grace = time.Minute
	var heldB net.Conn
	for range queued {
		nc, err := ln.Accept()
		require.NoError(t, err)
		defer nc.Close()
		if descriptorOf(t, nc) == fdA {
			heldB = nc
			break
		}
	}
	require.NotNil(t, heldB, "no connection took descriptor %d", fdA)
	require.True(t, q.hold(heldB, fdA, roomForAll))

	_, err = clientA.Write([]byte{'x'}) // reaches A's socket, alive through the dup
	require.NoError(t, err)
	newcomer, err := net.Dial("tcp", ln.Addr().String()) // for the listener, in case
	require.NoError(t, err)
	defer newcomer.Close()
	nc, fresh, err := q.next()
	require.NoError(t, err)
	defer nc.Close()
	assert.True(t, fresh, "a newcomer, not the silent B handed on for A's byte")
	assert.NotSame(t, heldB, nc)
}

// gatedListener is a wrapper of a *net.TCPListener whose Accept could
// block, as one that waited for a token would.
type gatedListener struct{ *net.TCPListener }

func (l gatedListener) Accept() (net.Conn, error) { return l.TCPListener.Accept() }

// TestQuarantineOnlyOnTCPListener: the quarantine assumes that Accept
// returns at once when the listener is readable, which only a
// *net.TCPListener promises; a wrapper, even one that embeds it, may
// block in its Accept and strand the connections that spoke.
func TestQuarantineOnlyOnTCPListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	for _, tc := range []struct {
		name  string
		ln    net.Listener
		holds bool
	}{
		{"*net.TCPListener", ln, true},
		{"a wrapper embedding one, with its own Accept", gatedListener{ln.(*net.TCPListener)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newQuarantine(tc.ln, func() {}, discardLogger().Log)
			defer q.close()
			assert.Equal(t, tc.holds, q.poller != nil)
		})
	}
	require.NoError(t, ln.Close())
}

// TestQuarantineFullHandsOnTheOldestThatSpoke: full, the quarantine makes
// room by letting go of the connection held longest, whose request may
// have arrived since the poller last reported (here nothing has waited on
// it since). That one is not closed: Accept hands it on next, and it is
// admitted as the peek finds it, with its request complete, as being
// answered, never as waiting, which eviction could close with the request
// unread.
func TestQuarantineFullHandsOnTheOldestThatSpoke(t *testing.T) {
	l, ln, counters := newQuarantineLimiter(t, time.Minute)
	q := l.quarantine
	for !l.crowded() {
		dialStalled(t, ln.Addr().String())
		nc, err := l.Accept()
		require.NoError(t, err)
		defer nc.Close()
	}
	var clients, held []net.Conn
	room := l.quarantineRoom()
	for range room {
		c, nc := dialHeld(t, ln, q)
		clients, held = append(clients, c), append(held, nc)
	}
	_, err := io.WriteString(clients[0], healthzRequest)
	require.NoError(t, err)
	eventually(t, func() bool { return spoke(held[0]) }, "the oldest's request arrived")
	accepted, evicted := counters.accepted.Load(), counters.evicted.Load()

	newcomer, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer newcomer.Close()
	nc, err := ln.Accept()
	require.NoError(t, err)
	require.Nil(t, l.route(nc, true), "the newcomer, held")
	silent, ready := heldIn(q)
	assert.Len(t, silent, room)
	assert.Equal(t, newcomer.LocalAddr().String(), silent[len(silent)-1], "the newcomer held in the oldest's place")
	require.Equal(t, 1, ready, "the oldest, to be handed on")

	next, fresh, err := q.next()
	require.NoError(t, err)
	assert.False(t, fresh)
	assert.Same(t, held[0], next)
	got := l.route(next, fresh)
	require.NotNil(t, got)
	defer got.Close()
	assert.Equal(t, slotActive, got.(*limitedConn).state, "its request is complete: never evicted")
	assert.Equal(t, accepted, counters.accepted.Load(), "neither counted again")
	// Handed on, it took a slot beside a full quarantine: the next
	// oldest, silent, is closed to keep the two within their budget.
	assertClosedByServer(t, clients[1], "the next oldest")
	assert.Equal(t, evicted+1, counters.evicted.Load())
	silent, _ = heldIn(q)
	assert.Len(t, silent, room-1)
	assert.Equal(t, descriptorBudget(l.limit), len(silent)+int(counters.held.Load()), "within the budget")
}

// TestCrowded: an empty newcomer is held apart when the slots near the
// eviction threshold, when a quarter of them wait for requests that have
// not begun (slow clients that have begun do not count), or within a
// grace of an eviction; it takes a slot otherwise.
func TestCrowded(t *testing.T) {
	now := monotonicNow()
	for _, tc := range []struct {
		name                               string
		limit, held, evicted, emptyWaiting int
		lastEviction                       int64
		want                               bool
	}{
		{"empty", 8, 0, 0, 0, 0, false},
		{"one short of the threshold", 8, 5, 0, 0, 0, false},
		{"at the threshold", 8, 6, 0, 0, 0, true},
		{"at it, but for the evicted", 8, 7, 2, 0, 0, false},
		{"the default bound, one short", 256, 222, 0, 0, 0, false},
		{"the default bound, at the threshold", 256, 223, 0, 0, 0, true},
		{"a quarter of the slots empty", 8, 2, 0, 2, 0, true},
		{"one short of a quarter empty", 8, 2, 0, 1, 0, false},
		{"a quarter of the slots slow, none empty", 8, 2, 0, 0, 0, false},
		{"the default bound, a quarter empty", 256, 64, 0, 64, 0, true},
		{"the default bound, one short", 256, 64, 0, 63, 0, false},
		{"a bound of 2, one empty", 2, 1, 0, 1, 0, true},
		{"a bound of 2, none", 2, 0, 0, 0, 0, false},
		{"an eviction within the grace", 8, 0, 0, 0, now - int64(quarantineGrace/2), true},
		{"an eviction past the grace", 8, 0, 0, 0, now - int64(2*quarantineGrace), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &connLimiter{limit: tc.limit, reserve: tc.limit / 8, held: tc.held, evicted: tc.evicted, emptyWaiting: tc.emptyWaiting, quarantine: &quarantine{grace: quarantineGrace}}
			l.lastEviction.Store(tc.lastEviction)
			assert.Equal(t, tc.want, l.crowded())
		})
	}
}

// TestQuarantineYieldsToTheSlots: the slots and the quarantine share one
// descriptor budget. The quarantine fills what the slots leave; when a
// slot is taken, it lets go of the connection it has held longest,
// closed unspoken, so that the two together stay within the budget.
func TestQuarantineYieldsToTheSlots(t *testing.T) {
	l, ln, counters := newQuarantineLimiter(t, time.Minute)
	q := l.quarantine
	room := l.quarantineRoom()
	require.Equal(t, descriptorBudget(l.limit), room, "no slot in use")
	var clients []net.Conn
	for range room {
		c, _ := dialHeld(t, ln, q)
		clients = append(clients, c)
	}
	evicted := counters.evicted.Load()

	slow, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer slow.Close()
	_, err = io.WriteString(slow, "GET /readyz HTTP/1.1\r\n") // begun, not complete
	require.NoError(t, err)
	nc, err := ln.Accept()
	require.NoError(t, err)
	eventually(t, func() bool { return spoke(nc) }, "the slow client's bytes arrived")
	got := l.route(nc, true)
	require.NotNil(t, got, "admitted to a slot")
	defer got.Close()

	assertClosedByServer(t, clients[0], "the oldest held")
	assert.Equal(t, evicted+1, counters.evicted.Load())
	silent, ready := heldIn(q)
	assert.Len(t, silent, room-1)
	assert.Zero(t, ready)
	assert.Equal(t, descriptorBudget(l.limit), len(silent)+int(counters.held.Load()), "within the budget")
}

// TestCrowdedIsPerListener serves one Server on two listeners and floods
// one: only that one holds its empty newcomers. On the other, at rest, a
// probe that writes its request past the quarantine's grace is admitted
// at once and answered, as it would be with no flood anywhere.
func TestCrowdedIsPerListener(t *testing.T) {
	floodTest(t)
	s, _, lnA := listenReady(t)
	lnB, err := s.Listen()
	require.NoError(t, err)
	addrA, _ := startServingOn(t, lnA, func(ctx context.Context, ln net.Listener) error { return s.serve(ctx, ln, 4) })
	addrB, _ := startServingOn(t, lnB, func(ctx context.Context, ln net.Listener) error { return s.serve(ctx, ln, 8) })
	assertProbesAnswered(t, addrB, 1) // Serve has set the deferral by now
	clearDeferAccept(t, lnB)

	stop := flood(t, addrA, 16, stalled)
	eventually(t, func() bool { return s.conns.evicted.Load() > 100 }, "the flood evicting on A")
	for i := range 3 {
		before := s.conns.evicted.Load()
		got, late, err := lateProbe(addrB, "/healthz", quarantineGrace+50*time.Millisecond)
		require.NoError(t, err, "probe %d, sent %v after its handshake", i, late)
		assert.True(t, strings.HasPrefix(got, "HTTP/1.1 200 OK\r\n") && strings.HasSuffix(got, "\r\n\r\nok\n"), "probe %d: %q", i, got)
		assert.Greater(t, s.conns.evicted.Load(), before, "probe %d: A evicting meanwhile", i)
	}
	stop()
}

// TestQuarantineOutOfDescriptorsWithNobodyConnecting: while connections
// are held, Accept comes round every quarantineLook, and once the rest of
// the process holds every descriptor its accept fails each time, queue
// empty or not. No held connection may be closed for that: nobody is
// connecting. (The descriptor limit is the process's, so the test lowers
// it only while it looks, and no test runs beside it.)
func TestQuarantineOutOfDescriptorsWithNobodyConnecting(t *testing.T) {
	r := newQuarantineRig(t, 4, time.Minute)
	var clients []net.Conn
	for range 3 {
		clients = append(clients, r.dialEmpty())
	}
	evicted := r.counters.evicted.Load()

	var limit syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &limit))
	var fillers []int
	restore := func() {
		for _, fd := range fillers {
			_ = syscall.Close(fd)
		}
		fillers = nil
		require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &limit))
	}
	defer restore()
	low := limit
	low.Cur = uint64(highestDescriptor(t) + 2)
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low))
	for {
		fd, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			require.ErrorIs(t, err, syscall.EMFILE)
			break
		}
		fillers = append(fillers, fd)
	}
	// Nothing happens is the subject: watch for twenty looks.
	for end := time.Now().Add(20 * quarantineLook); time.Now().Before(end); time.Sleep(quarantineLook) {
		require.Equal(t, evicted, r.counters.evicted.Load(), "a held connection closed for nobody")
	}
	restore()

	silent, _ := r.held()
	assert.Len(t, silent, len(clients), "all still held")
	_, err := io.WriteString(clients[0], healthzRequest)
	require.NoError(t, err)
	select {
	case c := <-r.accepted:
		assert.Equal(t, clients[0].LocalAddr().String(), c.RemoteAddr().String())
	case <-time.After(10 * time.Second):
		t.Fatal("the held connection that spoke was not handed on")
	}
}

// highestDescriptor returns the highest descriptor the process has open.
func highestDescriptor(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	highest := 0
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil {
			highest = max(highest, fd)
		}
	}
	return highest
}

// TestQuarantineSettleWhileStopping: a held connection let go of just as
// Serve stops is closed, whether it has spoken or not: the quarantine has
// been released, and nothing would hand it on or close it later. It
// counts as nothing: Serve is stopping, not making room.
func TestQuarantineSettleWhileStopping(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoke bool
	}{
		{"spoken", true},
		{"silent", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, ln, counters := newQuarantineLimiter(t, time.Minute)
			q := l.quarantine
			client, held := dialHeld(t, ln, q)
			if tc.spoke {
				_, err := io.WriteString(client, healthzRequest)
				require.NoError(t, err)
				eventually(t, func() bool { return spoke(held) }, "its request arrived")
			}

			q.mu.Lock()
			c := q.silent.front()
			q.drop(c) // as shrink does, before it settles
			q.mu.Unlock()
			q.close()
			q.settle(c)

			assertClosedByServer(t, client)
			_, ready := heldIn(q)
			assert.Zero(t, ready, "nothing handed on")
			assert.Zero(t, counters.evicted.Load(), "nothing counted")
		})
	}
}

package health

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeClock is a clock that moves only when a test moves it: the one seam
// through which the tests pass time by hand. Its timers and tickers run
// in the goroutine that moves it, once they are due, never before; a
// timer armed already due (a deadline in the past) runs at the next move,
// as the system's runs once its goroutine is scheduled.
type fakeClock struct {
	mu     sync.Mutex
	t      time.Time
	timers []*fakeTimer // armed
}

// fakeEpoch is where every fake clock starts: a fixed time, so that a
// test may check the times Status shows exactly.
var fakeEpoch = time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)

func newFakeClock() *fakeClock { return &fakeClock{t: fakeEpoch} }

// fakeTimer is a fakeClock's timer, or its ticker when period is set.
type fakeTimer struct {
	c      *fakeClock
	at     time.Time
	f      func()         // a timer's
	ch     chan time.Time // a ticker's, holding one tick as time.Ticker's does
	period time.Duration  // a ticker's
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) afterFunc(d time.Duration, f func()) timer {
	return c.arm(&fakeTimer{c: c, f: f}, d)
}

func (c *fakeClock) newTicker(d time.Duration) ticker {
	return fakeTicker{c.arm(&fakeTimer{c: c, ch: make(chan time.Time, 1), period: d}, d)}
}

// arm (re)arms ft d from now.
func (c *fakeClock) arm(ft *fakeTimer, d time.Duration) *fakeTimer {
	c.mu.Lock()
	defer c.mu.Unlock()
	ft.at = c.t.Add(d)
	if !slices.Contains(c.timers, ft) {
		c.timers = append(c.timers, ft)
	}
	return ft
}

func (ft *fakeTimer) Stop() bool {
	c := ft.c
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.Index(c.timers, ft)
	if i >= 0 {
		c.timers = slices.Delete(c.timers, i, i+1)
	}
	return i >= 0
}

// fakeTicker is a fakeTimer with a period, as a ticker.
type fakeTicker struct{ ft *fakeTimer }

func (t fakeTicker) C() <-chan time.Time   { return t.ft.ch }
func (t fakeTicker) Reset(d time.Duration) { t.ft.c.arm(t.ft, d) }
func (t fakeTicker) Stop()                 { t.ft.Stop() }

// jump moves the clock d forward and runs nothing: the timers now due
// have not run yet, as when their goroutines are still to be scheduled.
func (c *fakeClock) jump(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// advance moves the clock d forward as time passes: every timer due on
// the way runs at its time, earliest first, those they arm included, in
// this goroutine; a due ticker sends a tick if its channel has room, and
// rearms a period on. A timer already late (see jump) runs at once. Time
// that passes while a timer runs (another goroutine's advance) is time
// that timer took: the clock never goes back.
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	end := c.t.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		var due *fakeTimer
		for _, ft := range c.timers {
			if !ft.at.After(end) && (due == nil || ft.at.Before(due.at)) {
				due = ft
			}
		}
		if due == nil {
			if end.After(c.t) { // another advance, run by a timer of this one's, may have gone further
				c.t = end
			}
			c.mu.Unlock()
			return
		}
		if due.at.After(c.t) {
			c.t = due.at
		}
		if due.f == nil {
			select {
			case due.ch <- c.t:
			default:
			}
			due.at = due.at.Add(due.period)
			c.mu.Unlock()
			continue
		}
		c.timers = slices.DeleteFunc(c.timers, func(ft *fakeTimer) bool { return ft == due })
		c.mu.Unlock()
		due.f()
	}
}

// tickerAt returns when the clock's ticker (a Server has one, its
// poller's) ticks next; the zero time when none is armed.
func (c *fakeClock) tickerAt() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ft := range c.timers {
		if ft.f == nil {
			return ft.at
		}
	}
	return time.Time{}
}

// newFakeClockServer is newTestServer on a fake clock.
func newFakeClockServer(t *testing.T) (*Server, *logBuffer, *fakeClock) {
	t.Helper()
	clk := newFakeClock()
	logs := &logBuffer{}
	logs.server = newServer(Config{Listen: "127.0.0.1:0"}, slogTo(logs), clk)
	return logs.server, logs, clk
}

// newFakeClockReadyServer is newReadyServer on a fake clock.
func newFakeClockReadyServer(t *testing.T) (*Server, *logBuffer, *fakeClock) {
	t.Helper()
	s, logs, clk := newFakeClockServer(t)
	setLatches(s)
	if err := s.Ready(); err != nil {
		t.Fatal(err)
	}
	return s, logs, clk
}

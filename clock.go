package health

import "time"

// clock is where a Server reads the time and arms its timers: the
// watchdogs' deadline timer, the check's stall timer and the poller's
// ticker. NewServer gives every Server the system's. The package's tests
// build theirs on one they move by hand, so that a deadline or a stall
// passes exactly where a test puts it, never where a loaded machine
// happens to schedule a timer; and a Server's own clock, not a variable
// shared by every Server, is what they move.
type clock interface {
	now() time.Time
	afterFunc(d time.Duration, f func()) timer
	newTicker(d time.Duration) ticker
}

// timer is a timer a clock armed to call a function, as time.AfterFunc's.
type timer interface {
	Stop() bool
}

// ticker is a clock's ticker, as time.Ticker, its channel a method.
type ticker interface {
	C() <-chan time.Time
	Reset(d time.Duration)
	Stop()
}

// systemClock is package time's clock, with its monotonic readings.
type systemClock struct{}

func (systemClock) now() time.Time { return time.Now() }

func (systemClock) afterFunc(d time.Duration, f func()) timer { return time.AfterFunc(d, f) }

func (systemClock) newTicker(d time.Duration) ticker { return systemTicker{time.NewTicker(d)} }

// systemTicker is a time.Ticker as a ticker.
type systemTicker struct{ t *time.Ticker }

func (t systemTicker) C() <-chan time.Time   { return t.t.C }
func (t systemTicker) Reset(d time.Duration) { t.t.Reset(d) }
func (t systemTicker) Stop()                 { t.t.Stop() }

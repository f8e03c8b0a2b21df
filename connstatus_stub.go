package health

import (
	"sync/atomic"
	"time"
)

// ConnStatus is a snapshot of the connections Serve holds. Its counters
// add up over every Serve call of the Server.
type ConnStatus struct {
	Held     int    // connections held now (counted until their goroutines end)
	Limit    int    // the bound on Held: a quarter of the soft descriptor limit, at most 256
	Accepted uint64 // connections accepted since Serve began
	Evicted  uint64 // of those, closed to make room: a local flood's signature
	Pressure bool   // Serve is defending itself now: it evicted within the last 10 s
}

type connCounters struct {
	held         atomic.Int64
	limit        atomic.Int64
	accepted     atomic.Uint64
	evicted      atomic.Uint64
	lastEviction atomic.Int64 // UnixNano; 0 before the first
}

func (cc *connCounters) status() ConnStatus {
	last := cc.lastEviction.Load()
	return ConnStatus{
		Held:     int(cc.held.Load()),
		Limit:    int(cc.limit.Load()),
		Accepted: cc.accepted.Load(),
		Evicted:  cc.evicted.Load(),
		Pressure: last != 0 && time.Since(time.Unix(0, last)) < 10*time.Second,
	}
}

package health

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestChangedFollowsTheUnmetSet: the channel is closed by the change
// itself, before the setter returns, by every change of the unmet set and
// by nothing else.
func TestChangedFollowsTheUnmetSet(t *testing.T) {
	s, _ := newTestServer(t)
	w := s.Watch("loop", time.Hour)
	defer w.Stop()
	steps := []struct {
		name    string
		change  func()
		changes bool
	}{
		{"registered", s.SetRegistered, true},
		{"registered again", s.SetRegistered, false},
		{"data plane ready", s.SetDataPlaneReady, true},
		{"first Beat", w.Beat, true},
		{"Beat", w.Beat, false},
		{"pull only: still ready", func() { s.SetDeliveryMode(DeliveryModePullOnly) }, false},
		{"subsystem stopped", func() { s.SetSubsystemStopped("a") }, true},
		{"another name: same set, more detail", func() { s.SetSubsystemStopped("b") }, false},
		{"degraded", func() { s.SetDeliveryMode(DeliveryModeDegradedPolling) }, true},
		{"another degraded mode: same set", func() { s.SetDeliveryMode("") }, false},
		{"a new watchdog", func() { s.Watch("another", time.Hour).Stop() }, false}, // unmet, then stopped: two changes
		{"check pending", func() { setCheckVerdict(s, checkVerdict{pending: true}) }, true},
	}
	for _, step := range steps {
		ch := s.Changed()
		assert.Equal(t, ch, s.Changed(), "%s: every caller between two changes gets the same channel", step.name)
		step.change()
		if step.name == "a new watchdog" {
			assert.True(t, isClosed(ch), step.name)
			continue
		}
		assert.Equal(t, step.changes, isClosed(ch), step.name)
	}
}

// TestChangedWatcherEndsOnTheCurrentState runs the documented loop against
// 500 rapid changes: it wakes after changes, never spins, and always ends
// having read the final state, whichever it is.
func TestChangedWatcherEndsOnTheCurrentState(t *testing.T) {
	for _, final := range []struct {
		name  string
		flips int
		want  error
	}{
		{"ending not ready", 499, ErrDeliveryDegraded},
		{"ending ready", 500, nil},
	} {
		t.Run(final.name, func(t *testing.T) {
			s, _ := newReadyServer(t)
			type observation struct {
				err    error
				wakeup int
			}
			seen := make(chan observation, 1)
			quit := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				for wakeup := 0; ; wakeup++ {
					ch := s.Changed()
					err := s.Ready()
					select { // keep only the latest observation
					case <-seen:
					default:
					}
					seen <- observation{err, wakeup}
					select {
					case <-ch:
					case <-quit:
						return
					}
				}
			}()
			stop := sync.OnceFunc(func() {
				close(quit)
				<-done
			})
			defer stop()
			for i := 1; i <= final.flips; i++ {
				if i%2 == 1 {
					s.SetDeliveryMode(DeliveryModeDegradedPolling)
				} else {
					s.SetDeliveryMode(DeliveryModeStreaming)
				}
			}
			require.Equal(t, final.want, errors.Unwrap(s.Ready()))
			// The watcher is seen's only sender; the test only takes from
			// it, and keeps what it took, so neither side can block the
			// other.
			var last observation
			eventually(t, func() bool {
				select {
				case last = <-seen:
				default:
				}
				return errors.Unwrap(last.err) == final.want && last.err == s.Ready()
			}, "the watcher reads the final state")
			// The watcher now waits on a channel no change will close:
			// a watcher that had missed the last change would still
			// hold the state before it.
			stop()
			select { // anything it observed after the last take
			case last = <-seen:
			default:
			}
			assert.Equal(t, s.Ready(), last.err)
			assert.LessOrEqual(t, last.wakeup, final.flips, "one wakeup per change at most: never a spin")
		})
	}
}

// TestChangedNeverSlowsAProbe: a probe neither reads nor allocates for
// Changed's watchers.
func TestChangedNeverSlowsAProbe(t *testing.T) {
	s, _ := newReadyServer(t)
	for range 3 {
		s.Changed()
	}
	h := s.Handler()
	w := newBenchWriter()
	req := httptest.NewRequest(http.MethodGet, "/readyz", nil)
	assert.Zero(t, testing.AllocsPerRun(1000, func() { h.ServeHTTP(w, req) }))
	assert.Equal(t, 200, w.status)
	assert.False(t, isClosed(s.Changed()), "a probe is no change")
}

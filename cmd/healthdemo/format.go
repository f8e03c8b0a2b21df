package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/meshnode/health"
)

// formatStatus writes the Status snapshot as a few indented lines for a
// person: what is unmet, how the check is doing, the watched loops (with
// an overdue one's stack), the connections Serve holds, and the probes
// answered.
func formatStatus(st health.Status) string {
	var b strings.Builder
	unmet := make([]string, len(st.Unmet))
	for i, err := range st.Unmet {
		unmet[i] = err.Error()
	}
	if len(unmet) == 0 {
		unmet = []string{"none"}
	}
	fmt.Fprintf(&b, "  unmet:  %s\n", strings.Join(unmet, ", "))

	c := st.Check
	set := "not set"
	if c.Installed {
		set = "set"
	}
	fmt.Fprintf(&b, "  check:  %s; %d runs, %d failed, %d panicked, %d stalled", set, c.Runs, c.Failures, c.Panics, c.Stalls)
	if !c.LastReturned.IsZero() {
		fmt.Fprintf(&b, "; the last took %v and returned at %s", c.LastDuration.Round(time.Microsecond), c.LastReturned.Format(time.TimeOnly))
	}
	b.WriteString("\n")

	if len(st.Watchdogs) == 0 {
		b.WriteString("  loops:  none\n")
	}
	for i, w := range st.Watchdogs {
		prefix := "  loops:  "
		if i > 0 {
			prefix = "          "
		}
		state := "met"
		if w.Overdue {
			state = "overdue"
		}
		fmt.Fprintf(&b, "%s%q %s; timeout %v; %d beats", prefix, w.Name, state, w.Timeout, w.Beats)
		if !w.LastBeat.IsZero() {
			fmt.Fprintf(&b, ", the last at %s", w.LastBeat.Format(time.TimeOnly))
		}
		fmt.Fprintf(&b, "; %d timeouts\n", w.Timeouts)
		// Where an overdue loop is stuck, as its deadline's log line says.
		label := "          stack:  "
		for line := range strings.Lines(w.Stack) {
			b.WriteString(label + strings.TrimSuffix(line, "\n") + "\n")
			label = "                  "
		}
	}

	pressure := ""
	if st.Conns.Pressure {
		pressure = "; under pressure: it evicted in the last 10 s"
	}
	fmt.Fprintf(&b, "  conns:  %d held of %d; %d accepted, %d evicted%s\n", st.Conns.Held, st.Conns.Limit, st.Conns.Accepted, st.Conns.Evicted, pressure)
	p := st.Probes
	fmt.Fprintf(&b, "  probes: %d healthz ok, %d readyz ok, %d readyz not ready, %d other", p.Liveness, p.ReadyOK, p.ReadyNotReady, p.Other)
	return b.String()
}

// lockedWriter serialises the replies and notices written from several
// goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (w *lockedWriter) printf(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fmt.Fprintf(w.w, format, args...)
}

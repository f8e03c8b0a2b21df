package main

import (
	"fmt"
	"strings"

	"github.com/meshnode/health/internal/hostile"
)

// kinds are the attacking clients, by name: every hostile client the
// health package's tests flood it with (internal/hostile); maxrequest,
// valid requests of the largest size Serve takes, to fill the kernel's
// accept queue; and bytetrickle, what costs a server most per client of
// the header-trickling kinds. Every kind has a flag of its name, on this
// command (for the custom load) and on the attack child, giving how many
// clients of that kind run at once.
var kinds = append(hostile.Clients(), maxRequest, byteTrickle)

// maxRequest is a client that sends one complete, valid request of the
// largest size Serve answers (see maxRequestBytes) and reconnects once
// answered: a crowd of them keeps the accept queue full of requests that
// are all worth answering.
var maxRequest = hostile.Client{
	Name:    "maxrequest",
	Help:    "a complete, valid GET /readyz?verbose&q=… of about 4 KiB in 62 header lines; reconnects once answered",
	Request: maxRequestBytes(),
}

// maxRequestBytes builds maxrequest's request: the request line, Host, 59
// header lines and the blank line, 62 lines in all, and about 4,000 bytes
// (Serve takes 4,095).
func maxRequestBytes() string {
	var b strings.Builder
	b.WriteString("GET /readyz?verbose&q=" + strings.Repeat("q", 200) + " HTTP/1.1\r\nHost: 127.0.0.1\r\n")
	for i := 0; i < 59; i++ {
		fmt.Fprintf(&b, "X-Probe-%02d: %s\r\n", i, strings.Repeat("v", 48))
	}
	b.WriteString("\r\n")
	return b.String()
}

// byteTrickle is slowloris at its most costly: a byte every
// hostile.ByteEvery, each an arrival the server must look at. It is kept
// out of the hostile mix, whose figures the earlier issues compare.
var byteTrickle = hostile.Client{
	Name:    "bytetrickle",
	Help:    fmt.Sprintf("a partial GET /healthz, then header lines a byte every %v until the server closes", hostile.ByteEvery),
	Request: "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n",
	Then:    hostile.TrickleBytes,
}

// findKind returns the kind of that name.
func findKind(name string) (hostile.Client, bool) {
	for _, k := range [...]hostile.Client{maxRequest, byteTrickle} {
		if name == k.Name {
			return k, true
		}
	}
	return hostile.Find(name)
}

// counts is how many clients of each kind, by name, a load runs. For a
// kind that loops (churn, resets), -1 is one loop per core.
type counts map[string]int

// describe lists the non-zero counts in the order of kinds, such as
// "1,000 slowloris + 1,000 idle".
func (c counts) describe() string {
	var parts []string
	for _, k := range kinds {
		switch n := c[k.Name]; {
		case n == 0:
		case n < 0:
			parts = append(parts, k.Name+" (one loop per core)")
		case k.Loops() && n == 1:
			parts = append(parts, k.Name+" (one loop)")
		case k.Loops():
			parts = append(parts, fmt.Sprintf("%s %s loops", thousands(n), k.Name))
		default:
			parts = append(parts, fmt.Sprintf("%s %s", thousands(n), k.Name))
		}
	}
	if len(parts) == 0 {
		return "no attackers"
	}
	return strings.Join(parts, " + ")
}

// clients is the number of clients that wait for the server, not counting
// the loops.
func (c counts) clients() int {
	t := 0
	for _, k := range kinds {
		if !k.Loops() {
			t += max(c[k.Name], 0)
		}
	}
	return t
}

// check refuses a name that is no kind, and -1 for a kind that waits.
func (c counts) check() error {
	for name, n := range c {
		k, ok := findKind(name)
		switch {
		case !ok:
			return fmt.Errorf("no attacker kind %q", name)
		case n < -1, n == -1 && !k.Loops():
			return fmt.Errorf("-%s %d: want a count of 0 or more (-1, one loop per core, is for the kinds that loop)", name, n)
		}
	}
	return nil
}

// thousands prints n with a comma between thousands, as the table does.
func thousands(n int) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + thousands(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

package main

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

const (
	// soakSettle is how long the soak waits after stopping the attackers
	// before its last snapshot: longer than the server's 2 s timeouts, so
	// that whatever the attack left behind has had time to go.
	soakSettle = 5 * time.Second
	// maxSoak bounds -soak.
	maxSoak = time.Hour
	// soakBar is the share of probes that must succeed, as under the
	// hostile mix's own load. The server bounds of the loads are not
	// the soak's: its log lines grow with its length, and its point is
	// the figures after the attack, which it prints.
	soakBar = 0.999
)

// runSoak runs the hostile mix for d while probing, from the first second
// of the attack on, then stops the attackers, waits soakSettle, and prints
// the server's RSS, goroutines and open descriptors at three points with
// the probes' success over the whole soak.
func runSoak(d time.Duration, server, addr string, cpus float64) (err error) {
	if addr != "" {
		return errors.New("-soak reads the server's own figures, so it starts its own server: leave -addr out")
	}
	if server == serverBoth {
		return fmt.Errorf("-soak runs one server: -server %s or %s, not %s", serverHealth, serverPlain, serverBoth)
	}
	if d <= 0 || d > maxSoak {
		return fmt.Errorf("-soak %v: want more than 0 and at most %v", d, maxSoak)
	}
	cg, release, err := cpuCgroupFor(cpus, fmt.Sprintf("the soak's CPU limit (-cpus %v)", cpus))
	if err != nil {
		return err
	}
	defer func() {
		if rerr := release(); err == nil {
			err = rerr
		}
	}()
	limit := ""
	if cg != nil {
		limit = fmt.Sprintf(", at %v cores (%s)", cpus, cg)
	}
	fmt.Printf("probeflood soak: server: %s%s; %v of the hostile mix (%s), probed throughout, a probe to each endpoint every %v, timeout %v; then %v to settle\n\n",
		serverTitle(server), limit, d, hostileMix.describe(), probeEvery, probeTimeout, soakSettle)
	srv, addr, err := startServer(server, 0, cg, cpus)
	if err != nil {
		return err
	}
	defer srv.cmd.Process.Kill() // a no-op once it has exited
	time.Sleep(time.Second)      // for Serve to be up, not starting
	before, err := snapshotOf(srv)
	if err != nil {
		return err
	}
	attack, err := startAttack(addr, hostileMix, d+30*time.Second)
	if err != nil {
		return err
	}
	defer attack.cmd.Process.Kill()
	if err := srv.send(markStart); err != nil {
		return err
	}
	results := probeFor(addr, d, 0)
	if err := srv.send(markEnd); err != nil {
		return err
	}
	if err := attack.send("mark"); err != nil {
		return err
	}
	atEnd, err := snapshotOf(srv)
	if err != nil {
		return err
	}
	ar, err := stopAttack(attack)
	if err != nil {
		return err
	}
	time.Sleep(soakSettle)
	settled, err := snapshotOf(srv)
	if err != nil {
		return err
	}
	released, err := requestSnapshot(srv, markRelease)
	if err != nil {
		return err
	}
	res, err := stopServer(srv)
	if err != nil {
		return err
	}

	fmt.Println(tableHead("server, now", "RSS (VmRSS)", "of which anonymous (RssAnon)", "live heap", "goroutines", "open descriptors", "connections held"))
	for _, p := range []struct {
		name string
		s    snapshot
	}{
		{"before the attack", before},
		{"at the end of the attack", atEnd},
		{fmt.Sprintf("%v after the attack", soakSettle), settled},
		{"then, free memory returned to the system (debug.FreeOSMemory)", released},
	} {
		fmt.Printf("| %s | %.1f MiB | %.1f MiB | %.1f MiB | %d | %d | %d |\n", p.name, float64(p.s.rssKiB)/1024, float64(p.s.anonKiB)/1024, float64(p.s.heapKiB)/1024, p.s.goroutines, p.s.fds, p.s.held)
	}
	healthz, readyz, p50, p99, shares := probeCells(results)
	v := probeVerdict(soakBar, shares)
	fmt.Println()
	fmt.Println(tableHead("/healthz ok", "/readyz ok", "p50", "p99", "attacker connects/s", "server peak RSS", "server peak live heap", "server peak goroutines", "server log lines (WARN+)", "server CPU (cores busy)", "server evictions/s", "Serve returned after cancel", "bar"))
	fmt.Printf("| %s | %s | %s | %s | %.0f | %s | %s |\n", healthz, readyz, p50, p99, ar.rate(), strings.Join(serverCells(&res), " | "), v.cell())
	if !v.passed() {
		return errors.New("the soak fell below its bar")
	}
	return nil
}

// snapshotOf asks the server child for a snapshot and returns it.
func snapshotOf(c *child) (snapshot, error) { return requestSnapshot(c, markSnapshot) }

// requestSnapshot sends mark, which makes the server child print a
// snapshot, and returns it.
func requestSnapshot(c *child, mark string) (snapshot, error) {
	if err := c.send(mark); err != nil {
		return snapshot{}, err
	}
	line, err := c.line("snapshot")
	if err != nil {
		return snapshot{}, err
	}
	return parseSnapshot(line)
}

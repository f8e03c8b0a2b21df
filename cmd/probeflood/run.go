package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// warmup is how long the attackers run before the prober starts, so that
// every probe meets the full load.
const warmup = 3 * time.Second

func runLoads(spec string, custom load, d time.Duration, addr, server string) error {
	loads, err := selectLoads(spec, custom)
	if err != nil {
		return err
	}
	target := "server: " + serverTitle(server)
	if addr != "" {
		if err := requireLoopback(addr); err != nil {
			return err
		}
		target = "target: " + addr + " (started elsewhere)"
	}
	fmt.Printf("probeflood: %s; %d s of probes per load, a probe to each endpoint every %v, timeout %v\n\n", target, int(d.Seconds()), probeEvery, probeTimeout)
	fmt.Println(tableHead("load", "/healthz ok", "/readyz ok", "p50", "p99", "attacker connects/s", "attacker connects failed", "kernel: accept queue overflows / SYN queue full (cookies, drops)", "server peak RSS", "server peak goroutines", "server CPU (cores busy)", "server evictions/s", "Serve returned after cancel", "bar"))
	failed := false
	for _, l := range loads {
		row, passed, err := runLoad(l, d, addr, server)
		if err != nil {
			return fmt.Errorf("load %q: %w", l.name, err)
		}
		fmt.Println(row)
		failed = failed || !passed
	}
	if failed {
		return fmt.Errorf("a load fell below its bar")
	}
	return nil
}

// child is a running child process of this command.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
}

func startChild(args ...string) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, args...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &child{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}, nil
}

// line returns the child's next output line that starts with prefix.
func (c *child) line(prefix string) (string, error) {
	for c.out.Scan() {
		if rest, ok := strings.CutPrefix(c.out.Text(), prefix+" "); ok {
			return rest, nil
		}
	}
	return "", fmt.Errorf("the child ended before printing %q", prefix)
}

// stop closes the child's standard input, which tells it to finish, and
// returns its result line.
func (c *child) stop() (string, error) {
	_ = c.stdin.Close()
	res, err := c.line("result")
	if werr := c.cmd.Wait(); err == nil && werr != nil {
		err = werr
	}
	return res, err
}

// send writes one line to the child's standard input.
func (c *child) send(line string) error {
	_, err := io.WriteString(c.stdin, line+"\n")
	return err
}

// startServer starts the server child and returns it with its address.
func startServer(server string, nofile int) (*child, string, error) {
	c, err := startChild("-role=server", "--", "-server", server, "-nofile", fmt.Sprint(nofile))
	if err != nil {
		return nil, "", err
	}
	addr, err := c.line("addr")
	if err != nil {
		_ = c.cmd.Process.Kill()
		_ = c.cmd.Wait()
		return nil, "", err
	}
	return c, addr, nil
}

// startAttack starts the attack child, which stops by itself after d.
func startAttack(addr string, n counts, d time.Duration) (*child, error) {
	return startChild(attackArgs(addr, n, d)...)
}

// stopServer stops the server child and returns its result.
func stopServer(c *child) (serverResult, error) {
	res, err := c.stop()
	if err != nil {
		return serverResult{}, err
	}
	return parseServerResult(res)
}

// stopAttack stops the attack child and returns its result.
func stopAttack(c *child) (attackResult, error) {
	res, err := c.stop()
	if err != nil {
		return attackResult{}, err
	}
	return parseAttackResult(res)
}

// probeCells formats the probes' success per endpoint and their latency,
// and says whether both endpoints reached bar.
func probeCells(results map[string][]outcome, bar float64) (healthz, readyz, p50, p99 string, passed bool) {
	passed = true
	cells := make([]string, 0, 2)
	var all []outcome
	for _, path := range []string{"/healthz", "/readyz"} {
		share, _, _ := summary(results[path])
		ok := 0
		for _, o := range results[path] {
			if o.ok {
				ok++
			}
		}
		cells = append(cells, fmt.Sprintf("%.2f%% (%d/%d)", 100*share, ok, len(results[path])))
		all = append(all, results[path]...)
		if bar > 0 && share < bar {
			passed = false
		}
	}
	_, q50, q99 := summary(all)
	return cells[0], cells[1], roundMs(q50), roundMs(q99), passed
}

// tableHead returns a markdown table's header row and the delimiter row
// beneath it, which must have as many cells, or the table is not drawn.
func tableHead(columns ...string) string {
	return "| " + strings.Join(columns, " | ") + " |\n|" + strings.Repeat("---|", len(columns))
}

// serverCells formats the server's peak RSS, peak goroutines, CPU,
// evictions a second and shutdown time.
func serverCells(r serverResult) string {
	evictions := "n/a"
	if r.evictions >= 0 {
		evictions = fmt.Sprintf("%.0f", r.evictions)
	}
	return fmt.Sprintf("%.1f MiB | %d | %s | %s | %.0f ms", float64(r.rssKiB)/1024, r.goroutines, formatCores(r.cores), evictions, r.shutdownMs)
}

func runLoad(l load, d time.Duration, addr, server string) (row string, passed bool, err error) {
	var srv *child
	if addr == "" {
		if srv, addr, err = startServer(server, l.serverNofile); err != nil {
			return "", false, err
		}
		defer srv.cmd.Process.Kill() // a no-op once it has exited
	}
	attack, err := startAttack(addr, l.clients, warmup+d+30*time.Second)
	if err != nil {
		return "", false, err
	}
	defer attack.cmd.Process.Kill()
	time.Sleep(warmup)

	kernelBefore := readKernelCounters()
	if srv != nil {
		if err := srv.send(markStart); err != nil {
			return "", false, err
		}
	}
	results := probeFor(addr, d, l.probeDelay)
	if srv != nil {
		if err := srv.send(markEnd); err != nil {
			return "", false, err
		}
	}
	kernel := readKernelCounters().since(kernelBefore)
	if err := attack.send("mark"); err != nil {
		return "", false, err
	}

	serverFigures := "n/a | n/a | n/a | n/a"
	if srv != nil {
		res, err := stopServer(srv) // under load: the attackers are still at it
		if err != nil {
			return "", false, err
		}
		serverFigures = serverCells(res)
	}
	ar, err := stopAttack(attack)
	if err != nil {
		return "", false, err
	}

	healthz, readyz, p50, p99, passed := probeCells(results, l.bar)
	name := l.name
	if l.id > 0 {
		name = fmt.Sprintf("%d. %s", l.id, l.name)
	}
	row = fmt.Sprintf("| %s | %s | %s | %s | %s | %.0f | %d | %d / %d, %d | %s | %s |", name, healthz, readyz,
		p50, p99, ar.rate(), ar.dialErrors,
		kernel.listenOverflows, kernel.synQueueCookies, kernel.synQueueDrops, serverFigures, barCell(l.bar, passed))
	return row, passed, nil
}

// barCell says what the bar was and whether the probes reached it.
func barCell(bar float64, passed bool) string {
	if bar <= 0 {
		return "report only"
	}
	verdict := "pass"
	if !passed {
		verdict = "FAIL"
	}
	return fmt.Sprintf("≥ %.1f%%: %s", 100*bar, verdict)
}

func roundMs(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000)
}
